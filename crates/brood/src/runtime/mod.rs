//! One session: configuration, wiring of model, tools, ledger and supervisor.
