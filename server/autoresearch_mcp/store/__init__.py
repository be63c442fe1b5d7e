"""The session's storage: its settings (config.json), its typed records and the ledger they fold into."""
