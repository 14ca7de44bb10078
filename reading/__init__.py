"""Reading the ledger live: a thread's records as they commit and the live text of its steps
among them, for every reader (the client's feeds, ``watch``, the console's pages and the API's
event stream).

- `threadwarden.reading.text`: live text as readers get it (`Delta`, `TextDelta`, the rows so
  far, `DeltaTracker`: what is new of each fragment; `NotedDeltas`: those notified meanwhile).
- `threadwarden.reading.placing`: `TextPlacer`, the one way text is placed among the records:
  after the record that opens its step, before the record that closes it.
- Two ways to listen, both on `COMMITTED_CHANNEL` (every record's statement notifies it,
  `threadwarden.ledger.records`) and `DELTA_CHANNEL`: a connection per reader
  (`threadwarden.reading.listening`, for `threadwarden.reading.feed`: the client's and
  ``watch``'s), or one listener shared by many readers (`threadwarden.reading.shared`: the
  console's).

The writers stay in the ledger (`threadwarden.ledger.records`, `threadwarden.ledger.deltas`).
"""
