//! Sub-agents: roles, definitions, grants, the supervisor, model-facing tools, fork, output contract.
