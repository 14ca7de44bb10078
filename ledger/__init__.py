"""The Postgres truth: migrations, repositories and the mutation gate. Knows nothing of Temporal."""
