"""Pure protocol decisions shared by the ledger and the workflows; no I/O."""
