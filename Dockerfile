# threadwarden: one image for every command (`worker`, `migrate`, `setup`, `submit`, `status`, …).
#   docker build -t threadwarden .
#   docker run --rm -e THREADWARDEN_DATABASE_URL=… -e THREADWARDEN_TEMPORAL_ADDRESS=… threadwarden migrate
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY . .
RUN pip install . \
 && useradd --create-home --uid 10001 threadwarden

# Run as an unprivileged user from its home, so the default data dir (.threadwarden) is writable.
USER threadwarden
WORKDIR /home/threadwarden

ENTRYPOINT ["threadwarden"]
CMD ["worker"]
