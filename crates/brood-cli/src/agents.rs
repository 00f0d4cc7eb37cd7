//! `brood agents …` (placeholder until the ledger lands).
use clap::Subcommand;
use std::path::Path;
#[derive(Subcommand)]
pub enum AgentsCmd {
    List,
}
pub async fn run(_cmd: AgentsCmd, _ws: &Path) -> i32 {
    0
}
