//! Prices: USD per million tokens per model, from the user's own config
//! (`[pricing."<model>"]`) or from an endpoint's published model list (OpenRouter's
//! `/models`), and [`cost_usd`], the one function that turns usage into dollars. A
//! model without a price has no cost (`None`), never 0 and never a guess: brood
//! carries no price table of its own (it would go stale).

use crate::model::Usage;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most a price may be, in USD per million tokens: far above any real price,
/// low enough that a sum over a session stays finite.
pub const MAX_PRICE_PER_MTOK: f64 = 1_000_000.0;

/// Presets whose `/models` list publishes prices (asked once per session, only for
/// a model the user's `[pricing]` does not price).
pub const PUBLISHES_PRICES: &[&str] = &["openrouter"];

/// One model's price, in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input tokens not served from the provider's cache.
    pub input_per_mtok: f64,
    /// Input tokens served from the cache (default: `input_per_mtok`).
    pub cached_input_per_mtok: Option<f64>,
    /// USD per million output tokens.
    pub output_per_mtok: f64,
}

/// What a usage cost at `price`, in USD. Cached input tokens are part of
/// `input_tokens` (as providers report them) and priced at the cached rate.
pub fn cost_usd(price: &Price, usage: &Usage) -> f64 {
    let cached = usage.cached_input_tokens.min(usage.input_tokens);
    let fresh = usage.input_tokens - cached;
    let cached_rate = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
    (fresh as f64 * price.input_per_mtok
        + cached as f64 * cached_rate
        + usage.output_tokens as f64 * price.output_per_mtok)
        / 1_000_000.0
}

/// The prices the user configured, by model id (`"deepseek-chat"`) or by
/// provider and model (`"openrouter/openai/gpt-4o"`; this form wins).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Pricing(BTreeMap<String, Price>);

/// A `[pricing]` table that cannot be used, naming the model and what is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("[pricing.\"{model}\"] {detail}")]
pub struct PricingError {
    /// The model.
    pub model: String,
    /// What is wrong with its price.
    pub detail: String,
}

impl Pricing {
    /// Read and check a `[pricing]` table: each entry is a [`Price`] whose numbers
    /// are finite, ≥ 0 and ≤ [`MAX_PRICE_PER_MTOK`].
    pub fn from_table(table: &toml::Table) -> Result<Pricing, PricingError> {
        let mut prices = BTreeMap::new();
        for (model, value) in table {
            let err = |detail: String| PricingError {
                model: model.clone(),
                detail,
            };
            let price: Price = value.clone().try_into().map_err(|e: toml::de::Error| {
                err(format!(
                    "{}; expected input_per_mtok, output_per_mtok and optionally \
                     cached_input_per_mtok (USD per million tokens)",
                    e.message()
                ))
            })?;
            let fields = [
                ("input_per_mtok", Some(price.input_per_mtok)),
                ("cached_input_per_mtok", price.cached_input_per_mtok),
                ("output_per_mtok", Some(price.output_per_mtok)),
            ];
            for (name, v) in fields {
                if let Some(v) = v {
                    if !v.is_finite() || !(0.0..=MAX_PRICE_PER_MTOK).contains(&v) {
                        return Err(err(format!(
                            "{name} = {v}: must be a number of USD per million tokens \
                             between 0 and {MAX_PRICE_PER_MTOK}"
                        )));
                    }
                }
            }
            prices.insert(model.clone(), price);
        }
        Ok(Pricing(prices))
    }

    /// The price of `model` on `provider`, if the user set one.
    pub fn price(&self, provider: &str, model: &str) -> Option<Price> {
        self.0
            .get(&format!("{provider}/{model}"))
            .or_else(|| self.0.get(model))
            .copied()
    }

    /// What `usage` of `model` on `provider` cost, or `None` when it has no price.
    pub fn cost(&self, provider: &str, model: &str, usage: &Usage) -> Option<f64> {
        self.price(provider, model).map(|p| cost_usd(&p, usage))
    }

    /// The prices in an endpoint's model list (`GET /models`), where its entries
    /// carry them as OpenRouter's do: `"pricing": {"prompt", "completion",
    /// "input_cache_read"}` in USD per token (strings or numbers). Entries without
    /// a usable price (missing, negative as for routers whose price varies, not a
    /// number, above [`MAX_PRICE_PER_MTOK`]) are left out: unpriced, not guessed.
    pub(crate) fn from_model_list(list: &serde_json::Value) -> Pricing {
        let per_mtok = |v: Option<&serde_json::Value>| -> Option<f64> {
            let per_token = match v? {
                serde_json::Value::String(s) => s.trim().parse::<f64>().ok()?,
                serde_json::Value::Number(n) => n.as_f64()?,
                _ => return None,
            };
            let p = per_token * 1_000_000.0;
            (p.is_finite() && (0.0..=MAX_PRICE_PER_MTOK).contains(&p)).then_some(p)
        };
        let mut prices = BTreeMap::new();
        let entries = list
            .get("data")
            .and_then(serde_json::Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for m in entries {
            let (Some(id), Some(p)) = (m.get("id").and_then(|v| v.as_str()), m.get("pricing"))
            else {
                continue;
            };
            let (Some(input), Some(output)) =
                (per_mtok(p.get("prompt")), per_mtok(p.get("completion")))
            else {
                continue;
            };
            prices.insert(
                id.to_string(),
                Price {
                    input_per_mtok: input,
                    cached_input_per_mtok: per_mtok(p.get("input_cache_read")),
                    output_per_mtok: output,
                },
            );
        }
        Pricing(prices)
    }

    /// No price at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every priced model, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Price)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_openrouter_model_list_gives_prices_per_million_and_skips_the_unusable() {
        let list = serde_json::json!({"data": [
            {"id": "a/b", "pricing": {"prompt": "0.0000025", "completion": "0.00001",
                                      "input_cache_read": "0.00000125"}},
            {"id": "auto", "pricing": {"prompt": "-1", "completion": "-1"}},
            {"id": "odd", "pricing": {"prompt": "cheap", "completion": "0"}},
            {"id": "plain"}
        ]});
        let p = Pricing::from_model_list(&list);
        let ab = p.price("x", "a/b").unwrap();
        assert!((ab.input_per_mtok - 2.5).abs() < 1e-9);
        assert!((ab.output_per_mtok - 10.0).abs() < 1e-9);
        assert!((ab.cached_input_per_mtok.unwrap() - 1.25).abs() < 1e-9);
        assert_eq!(p.iter().count(), 1, "{p:?}");
    }

    #[test]
    fn cached_tokens_are_priced_at_their_own_rate_and_bad_prices_are_refused() {
        let p = Price {
            input_per_mtok: 2.0,
            cached_input_per_mtok: Some(0.5),
            output_per_mtok: 8.0,
        };
        let u = Usage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            output_tokens: 500_000,
        };
        assert!((cost_usd(&p, &u) - (1.2 + 0.2 + 4.0)).abs() < 1e-9);
        let bad: toml::Table =
            toml::from_str("[m]\ninput_per_mtok = -1.0\noutput_per_mtok = 1.0\n").unwrap();
        let e = Pricing::from_table(&bad).unwrap_err();
        assert!(e.to_string().contains("input_per_mtok = -1"), "{e}");
        let typo: toml::Table =
            toml::from_str("[m]\ninput = 1.0\noutput_per_mtok = 1.0\n").unwrap();
        assert!(Pricing::from_table(&typo).is_err());
    }
}
