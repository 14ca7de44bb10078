"""Publication sinks for tests: they record what they got and fail on demand."""

from collections.abc import Sequence

from threadwarden.publication import PublishedRecord


class RecordingSink:
    """A sink that records what it got, and fails while ``failing`` is set."""

    name = "recording"

    def __init__(self) -> None:
        self.failing = False
        self.calls = 0
        self.published: list[PublishedRecord] = []

    async def publish(self, records: Sequence[PublishedRecord]) -> None:
        self.calls += 1
        if self.failing:
            raise ConnectionError("sink unreachable")
        self.published.extend(records)


class RequiredSink(RecordingSink):
    """A sink whose records must be published before dependent native work runs; it starts
    failing."""

    name = "required"
    required = True

    def __init__(self) -> None:
        super().__init__()
        self.failing = True
