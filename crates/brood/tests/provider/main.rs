//! Model providers through the `Model` trait: the OpenAI-compatible provider against
//! brood-mock (assembly, requests, retries, typed errors, the failures a broken
//! endpoint shows), the quirks of a real llama.cpp server replayed byte for byte,
//! the scripted model and record/replay, connection reuse across a tree, the one
//! HTTP/2 connection (opened once, opened again, refused streams), and the
//! environment's proxies. One test
//! binary (link time dominates a test build), one module per subject.
//!
//! `cargo test -p brood --test provider` runs them all; a module alone:
//! `cargo test -p brood --test provider quirks::`.

#[path = "../common/mod.rs"]
mod common;

mod connections;
mod h2;
mod openai;
mod proxy;
mod quirks;
mod scripted_replay;

use brood::model::{Model, ModelError, ModelRequest, ModelResponse, StreamEvent};
use std::sync::Mutex;

/// Run one step of `model`, collecting the events it streamed.
pub async fn step(
    model: &dyn Model,
    req: &ModelRequest,
) -> (Result<ModelResponse, ModelError>, Vec<StreamEvent>) {
    let seen = Mutex::new(Vec::new());
    let on = |e: StreamEvent| seen.lock().unwrap().push(e);
    let r = model.step(req, &on).await;
    (r, seen.into_inner().unwrap())
}
