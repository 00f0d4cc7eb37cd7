//! The session's models: the main model and the builder of children's routes,
//! per the [`ModelSource`] (live, recorded, replayed or fixed).

use super::config::Config;
use super::error::SessionError;
use super::options::ModelSource;
use super::provider::ProviderFactory;
use crate::model::record::{Recorder, Replayer};
use crate::model::{Model, ModelError};
use std::sync::Arc;

pub(super) type Models = (
    String,
    String,
    Arc<dyn Model>,
    crate::subagent::RouteBuilder,
);

/// The main model and the builder for other routes, per the model source.
pub(super) fn build_models(
    config: &Config,
    factory: &ProviderFactory,
    source: &ModelSource,
    route_builder: Option<crate::subagent::RouteBuilder>,
) -> Result<Models, SessionError> {
    let default_routes = |wrap: Option<Arc<dyn Model>>| -> crate::subagent::RouteBuilder {
        let f = factory.clone();
        Arc::new(move |provider: &str, model: &str| match &wrap {
            Some(m) => Ok(m.clone()),
            None => f.named(provider, model).map(|r| r.model),
        })
    };
    let model_id = || super::provider::main_model_id(config);
    let (provider, id, main, routes) = match source {
        ModelSource::Live => {
            let r = factory.main()?;
            (r.provider_name, r.model_id, r.model, default_routes(None))
        }
        ModelSource::Record(path) => {
            let r = factory.main()?;
            // One writer for the whole tree: children's steps go through it too.
            let rec = Arc::new(Recorder::create(r.model, path).map_err(record_error)?);
            let f = factory.clone();
            let sink = rec.clone();
            let routes: crate::subagent::RouteBuilder =
                Arc::new(move |provider: &str, model: &str| {
                    let inner = f.named(provider, model)?.model;
                    Ok(Arc::new(sink.share(inner)) as Arc<dyn Model>)
                });
            (r.provider_name, r.model_id, rec as Arc<dyn Model>, routes)
        }
        ModelSource::Replay(path) => {
            let rep: Arc<dyn Model> = Arc::new(
                Replayer::from_file(path)
                    .map_err(record_error)?
                    .with_agent_namer(Arc::new(agent_name)),
            );
            (
                config.provider.clone(),
                model_id()?,
                rep.clone(),
                default_routes(Some(rep)),
            )
        }
        ModelSource::Fixed(m) => (
            m.provider_name().to_string(),
            config.model.clone().unwrap_or_else(|| "scripted".into()),
            m.clone(),
            default_routes(Some(m.clone())),
        ),
        ModelSource::FixedMain(m) => (
            m.provider_name().to_string(),
            config.model.clone().unwrap_or_else(|| "scripted".into()),
            m.clone(),
            default_routes(None),
        ),
    };
    Ok((provider, id, main, route_builder.unwrap_or(routes)))
}

/// Which agent of a tree sent `request`, for a replay mismatch: its role (found by
/// the role's stance in the system prompt; none is the parent) and its task.
fn agent_name(request: &crate::model::ModelRequest) -> String {
    let task: String = request
        .messages
        .iter()
        .find(|m| m.role == crate::model::Role::User)
        .map(|m| m.content.chars().take(40).collect())
        .unwrap_or_default();
    match crate::subagent::Role::ALL
        .iter()
        .find(|r| request.system.contains(r.stance_prompt()))
    {
        Some(role) => format!("{role} child with task {task:?}"),
        None => format!("the parent (prompt {task:?})"),
    }
}

fn record_error(e: crate::model::record::RecordError) -> SessionError {
    SessionError::Model(ModelError::Config(e.to_string()))
}
