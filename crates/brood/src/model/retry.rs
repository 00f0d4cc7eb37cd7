//! Retrying transient failures and typing the others.
//!
//! [`retry`] runs attempts until one succeeds, a non-transient error comes, or
//! [`RetryPolicy::max_attempts`] is reached (then [`ModelError::RetriesExhausted`]).
//! Waits are jittered exponential backoff, or the server's `Retry-After` (seconds,
//! fractional seconds, or an HTTP date) bounded by [`RetryPolicy::max_retry_after`].
//! [`classify_status`] turns an HTTP error answer into the matching [`ModelError`].

use super::{EventFn, ModelError, StreamEvent};
use serde_json::Value;
use std::future::Future;
use std::time::{Duration, SystemTime};

/// The largest accepted `api_timeout_secs`: the longest one step (every attempt
/// of it) may take.
pub const MAX_API_TIMEOUT_SECS: u64 = 1800;

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (at least 1).
    pub max_attempts: u32,
    /// The first backoff; each retry doubles it.
    pub base_delay: Duration,
    /// Backoff never exceeds this.
    pub max_delay: Duration,
    /// A server's `Retry-After` is honoured up to this.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The backoff before retry number `retry` (1 = the first retry), with `jitter` in
    /// `0.0..=1.0`: half the exponential delay plus a jittered half.
    pub fn backoff(&self, retry: u32, jitter: f64) -> Duration {
        let shift = retry.saturating_sub(1).min(30);
        let exp = self
            .base_delay
            .saturating_mul(1u32 << shift)
            .min(self.max_delay);
        let half = exp / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// The wait before retry number `retry` after `error`: the server's `Retry-After`
    /// (bounded by `max_retry_after`) when it sent one, else [`RetryPolicy::backoff`].
    pub(crate) fn delay_for(&self, retry: u32, error: &ModelError, jitter: f64) -> Duration {
        match error {
            ModelError::Status {
                retry_after_ms: Some(ms),
                ..
            } => Duration::from_millis(*ms).min(self.max_retry_after),
            _ => self.backoff(retry, jitter),
        }
    }
}

/// Run `attempt(n)` (n = 1, 2, …) until it succeeds or fails for good, the whole of it
/// bounded by `budget_secs` (the step's `api_timeout_secs`). Before each wait, reports
/// [`StreamEvent::Retrying`] (with the attempt that failed); after it the step starts
/// over, so partial deltas of the failed attempt are to be discarded.
///
/// Ends with:
/// - the first non-transient error as it is;
/// - [`ModelError::RetriesExhausted`] after [`RetryPolicy::max_attempts`];
/// - [`ModelError::StepBudget`] at once, without sleeping, when the wait before the next
///   attempt (the server's `Retry-After`, or the backoff) would not end before the
///   budget does, and when the budget runs out during an attempt that follows a failed
///   one: both name the last provider error and the attempts made;
/// - [`ModelError::Timeout`] when the budget runs out during the first attempt.
pub async fn retry<T, F, Fut>(
    policy: &RetryPolicy,
    budget_secs: u64,
    on_event: EventFn<'_>,
    mut attempt: F,
) -> Result<T, ModelError>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, ModelError>>,
{
    let max = policy.max_attempts.max(1);
    let start = tokio::time::Instant::now();
    let deadline = start
        .checked_add(Duration::from_secs(budget_secs))
        .unwrap_or(start + Duration::from_secs(MAX_API_TIMEOUT_SECS));
    let mut last: Option<ModelError> = None;
    let mut n: u32 = 1;
    loop {
        let e = match tokio::time::timeout_at(deadline, attempt(n)).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e,
            Err(_) => {
                return Err(match last {
                    None => ModelError::Timeout { secs: budget_secs },
                    Some(last) => ModelError::StepBudget {
                        secs: budget_secs,
                        attempts: n,
                        retry_after_ms: None,
                        last: Box::new(last),
                    },
                })
            }
        };
        if !e.is_transient() {
            return Err(e);
        }
        if n >= max {
            return Err(ModelError::RetriesExhausted {
                attempts: n,
                last: Box::new(e),
            });
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let asked = e.retry_after();
        let delay = policy.delay_for(n, &e, rand::random::<f64>());
        if asked.is_some_and(|a| a > left) || delay >= left {
            return Err(ModelError::StepBudget {
                secs: budget_secs,
                attempts: n,
                retry_after_ms: asked.filter(|a| *a > left).map(millis),
                last: Box::new(e),
            });
        }
        on_event(StreamEvent::Retrying {
            attempt: n,
            delay_ms: millis(delay),
            error: e.to_string(),
        });
        tokio::time::sleep(delay).await;
        last = Some(e);
        n = n.saturating_add(1);
    }
}

/// The longest `Retry-After` kept as it was sent (a day): anything longer is read as
/// this, which is far past any step budget (`api_timeout_secs` is at most 1800 s), so
/// the step still fails at once naming the server's wait. Keeps every later sum and
/// conversion of the value in range whatever the server sent.
pub(crate) const RETRY_AFTER_CEILING: Duration = Duration::from_secs(86_400);

/// Parse a `Retry-After` value: seconds (fractions accepted) or an HTTP date
/// (a date in the past means now). A value too large to be a duration (or above
/// [`RETRY_AFTER_CEILING`]) reads as the ceiling; a negative or non-numeric one
/// that is not a date reads as `None` (no server wait: plain backoff).
pub(crate) fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_nan() || secs < 0.0 {
            return None; // negative or NaN
        }
        // `try_from_secs_f64` refuses what does not fit a Duration (+inf, 1e20 …).
        let d = Duration::try_from_secs_f64(secs).unwrap_or(RETRY_AFTER_CEILING);
        return Some(d.min(RETRY_AFTER_CEILING));
    }
    let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    let when = SystemTime::from(when.with_timezone(&chrono::Utc));
    Some(
        when.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(RETRY_AFTER_CEILING),
    )
}

/// Milliseconds of `d`, saturating at `u64::MAX`.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Where an error answer came from, to name things in the error.
#[derive(Debug, Clone, Copy)]
pub struct ErrorContext<'a> {
    /// The URL that answered.
    pub url: &'a str,
    /// The model id requested.
    pub model: &'a str,
    /// The env var holding the key, if the provider has one.
    pub api_key_env: Option<&'a str>,
}

/// The server's message from an error body: `error.message`, `error` (a string),
/// `message` or `detail`, else the body text (shortened), else the status reason.
pub(crate) fn server_message(status: u16, body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let candidates = [
            v.pointer("/error/message"),
            v.get("error").filter(|e| e.is_string()),
            v.get("message"),
            v.get("detail"),
        ];
        for c in candidates.into_iter().flatten() {
            if let Some(s) = c.as_str() {
                if !s.trim().is_empty() {
                    return s.trim().to_string();
                }
            }
        }
    }
    let text = body.trim();
    if text.is_empty() {
        return hyper::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("no message")
            .to_string();
    }
    shorten(text, 500)
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

fn mentions_context_length(msg: &str, code: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    code == "context_length_exceeded"
        || [
            "context length",
            "context_length",
            "maximum context",
            "context window",
            "context size",
            "too many tokens",
            "prompt is too long",
            "input is too long",
            "reduce the length",
        ]
        .iter()
        .any(|p| m.contains(p))
}

fn mentions_unknown_model(msg: &str, code: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    code == "model_not_found"
        || (m.contains("model")
            && [
                "not found",
                "does not exist",
                "not exist",
                "unknown",
                "invalid model",
                "not supported",
                "no such",
                "not a valid model",
            ]
            .iter()
            .any(|p| m.contains(p)))
}

/// Type an HTTP error answer: 408/409/429/5xx → [`ModelError::Status`] (retried);
/// 401/403 → [`ModelError::Auth`]; context length → [`ModelError::ContextLength`];
/// unknown model (404, or 400/422 saying so) → [`ModelError::UnknownModel`]; other
/// 404 → [`ModelError::BadRequest`] pointing at the URL; else `BadRequest`.
pub fn classify_status(
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
    ctx: &ErrorContext<'_>,
) -> ModelError {
    let message = server_message(status, body);
    let code = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/code")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_default();
    match status {
        408 | 409 | 429 | 500..=599 => ModelError::Status {
            status,
            message,
            retry_after_ms: retry_after.map(millis),
        },
        401 | 403 => ModelError::Auth {
            status,
            url: ctx.url.to_string(),
            env_var: ctx.api_key_env.unwrap_or("").to_string(),
            message,
        },
        _ if mentions_context_length(&message, &code) => ModelError::ContextLength { message },
        404 if mentions_unknown_model(&message, &code)
            || (!ctx.model.is_empty() && message.contains(ctx.model)) =>
        {
            ModelError::UnknownModel {
                model: ctx.model.to_string(),
                message,
            }
        }
        404 => ModelError::BadRequest {
            status,
            message: format!("{message} (is the base URL right? {})", ctx.url),
        },
        _ if mentions_unknown_model(&message, &code) => ModelError::UnknownModel {
            model: ctx.model.to_string(),
            message,
        },
        _ => ModelError::BadRequest { status, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CTX: ErrorContext<'static> = ErrorContext {
        url: "http://x/v1/chat/completions",
        model: "m1",
        api_key_env: Some("KEY_VAR"),
    };

    #[test]
    fn backoff_doubles_is_capped_and_jitter_stays_in_upper_half() {
        let p = RetryPolicy {
            max_attempts: 9,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
            max_retry_after: Duration::from_secs(1),
        };
        assert_eq!(p.backoff(1, 0.0), Duration::from_millis(50));
        assert_eq!(p.backoff(1, 1.0), Duration::from_millis(100));
        assert_eq!(p.backoff(2, 1.0), Duration::from_millis(200));
        assert_eq!(p.backoff(3, 1.0), Duration::from_millis(350));
        assert_eq!(p.backoff(40, 0.0), Duration::from_millis(175));
        let e = ModelError::Status {
            status: 429,
            message: String::new(),
            retry_after_ms: Some(5000),
        };
        assert_eq!(p.delay_for(1, &e, 0.0), Duration::from_secs(1));
    }

    #[test]
    fn retry_after_seconds_fractions_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37 UTC
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after(" 0.25 ", now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("NaN", now), None);
        // Absurd values never panic: they read as the ceiling.
        for absurd in [
            "99999999999999999999",
            "1e300",
            "inf",
            "18446744073709551616",
        ] {
            assert_eq!(
                parse_retry_after(absurd, now),
                Some(RETRY_AFTER_CEILING),
                "{absurd}"
            );
        }
        assert_eq!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now),
            Some(RETRY_AFTER_CEILING)
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn statuses_are_typed() {
        let j = |m: &str| serde_json::json!({"error": {"message": m}}).to_string();
        assert!(classify_status(429, "", Some(Duration::from_secs(2)), &CTX).is_transient());
        assert!(classify_status(503, "", None, &CTX).is_transient());
        assert!(classify_status(408, "", None, &CTX).is_transient());
        assert!(classify_status(409, "", None, &CTX).is_transient());
        match classify_status(401, &j("bad key"), None, &CTX) {
            ModelError::Auth {
                env_var, message, ..
            } => {
                assert_eq!(env_var, "KEY_VAR");
                assert_eq!(message, "bad key");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify_status(
                400,
                &j("This model's maximum context length is 8192 tokens"),
                None,
                &CTX
            ),
            ModelError::ContextLength { .. }
        ));
        assert!(matches!(
            classify_status(400, &j("Model Not Exist"), None, &CTX),
            ModelError::UnknownModel { .. }
        ));
        assert!(matches!(
            classify_status(404, &j("The model `m1` does not exist"), None, &CTX),
            ModelError::UnknownModel { .. }
        ));
        match classify_status(404, "404 page not found", None, &CTX) {
            ModelError::BadRequest { message, .. } => assert!(message.contains("base URL")),
            other => panic!("{other:?}"),
        }
        match classify_status(422, &j("messages: field required"), None, &CTX) {
            ModelError::BadRequest { status, message } => {
                assert_eq!(status, 422);
                assert_eq!(message, "messages: field required");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(server_message(400, ""), "Bad Request");
        assert_eq!(server_message(400, "{\"error\": \"plain\"}"), "plain");
    }
}
