//! Figures and how they are shown: each measured figure carries its unit, the goal
//! it is held against (if any) and whether it met it; the whole run is printed as a
//! table and written as JSON together with the machine it ran on.

use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// What a figure is held against.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

impl Goal {
    fn met(self, v: f64) -> bool {
        match self {
            Goal::AtMost(g) => v <= g,
            Goal::AtLeast(g) => v >= g,
        }
    }
    fn show(self, unit: &str) -> String {
        match self {
            Goal::AtMost(g) => format!("≤ {}", with_unit(g, unit)),
            Goal::AtLeast(g) => format!("≥ {}", with_unit(g, unit)),
        }
    }
}

/// One measured number.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub scenario: String,
    pub name: String,
    pub value: f64,
    pub unit: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    /// `Some(true)` met, `Some(false)` missed, `None` informational.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pass: Option<bool>,
    /// Raw samples and context (JSON only).
    #[serde(skip_serializing_if = "Value::is_null")]
    pub detail: Value,
}

impl Figure {
    pub fn new(scenario: &str, name: impl Into<String>, value: f64, unit: &str) -> Figure {
        Figure {
            scenario: scenario.to_string(),
            name: name.into(),
            value,
            unit: unit.to_string(),
            goal: None,
            pass: None,
            detail: Value::Null,
        }
    }
    pub fn goal(mut self, goal: Goal) -> Figure {
        self.pass = Some(goal.met(self.value));
        self.goal = Some(goal);
        self
    }
    pub fn detail(mut self, detail: Value) -> Figure {
        self.detail = detail;
        self
    }
}

/// A scenario that could not produce its figures (the run went wrong, not slow).
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub scenario: String,
    pub error: String,
}

/// The machine a run came from.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub ram_gib: f64,
    pub kernel: String,
    pub os: String,
    /// Whether this binary was built with optimizations (figures from a debug build
    /// are not comparable).
    pub release_build: bool,
    /// `/proc/loadavg` when the run started: other work on the machine skews figures.
    pub loadavg_at_start: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let ram_kib = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let os = std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find(|l| l.starts_with("PRETTY_NAME="))
                    .map(|l| l["PRETTY_NAME=".len()..].trim_matches('"').to_string())
            })
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        Machine {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model,
            ram_gib: (ram_kib / (1024.0 * 1024.0) * 10.0).round() / 10.0,
            kernel,
            os,
            release_build: !cfg!(debug_assertions),
            loadavg_at_start: loadavg(),
        }
    }
}

/// The first three fields of `/proc/loadavg` (1, 5, 15 minutes).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Everything one run produced.
#[derive(Debug, Serialize)]
pub struct Results {
    pub brood_bench: &'static str,
    pub mode: &'static str,
    pub started_at: String,
    pub machine: Machine,
    pub figures: Vec<Figure>,
    pub failures: Vec<Failure>,
    pub loadavg_at_end: String,
    pub seconds: f64,
}

impl Results {
    pub fn missed(&self) -> usize {
        self.figures
            .iter()
            .filter(|f| f.pass == Some(false))
            .count()
    }
    pub fn met(&self) -> usize {
        self.figures.iter().filter(|f| f.pass == Some(true)).count()
    }

    /// The table printed at the end of a run.
    pub fn table(&self) -> String {
        let header = ["scenario", "figure", "value", "goal", ""];
        let rows: Vec<[String; 5]> = self
            .figures
            .iter()
            .map(|f| {
                [
                    f.scenario.clone(),
                    f.name.clone(),
                    with_unit(f.value, &f.unit),
                    f.goal.map(|g| g.show(&f.unit)).unwrap_or_default(),
                    match f.pass {
                        Some(true) => "pass".into(),
                        Some(false) => "MISS".into(),
                        None => String::new(),
                    },
                ]
            })
            .collect();
        let mut widths = header.map(|h| h.chars().count());
        for r in &rows {
            for (w, c) in widths.iter_mut().zip(r.iter()) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |cells: &[String], out: &mut String| {
            let mut s = String::new();
            for (i, (c, w)) in cells.iter().zip(widths.iter()).enumerate() {
                let pad = w.saturating_sub(c.chars().count());
                if i == 2 {
                    // numbers right-aligned
                    let _ = write!(s, "{}{}  ", " ".repeat(pad), c);
                } else {
                    let _ = write!(s, "{}{}  ", c, " ".repeat(pad));
                }
            }
            out.push_str(s.trim_end());
            out.push('\n');
        };
        line(&header.map(String::from), &mut out);
        line(&widths.map(|w| "-".repeat(w)), &mut out);
        let mut last = String::new();
        for r in rows {
            let mut r = r;
            if r[0] == last {
                r[0] = String::new();
            } else {
                last = r[0].clone();
            }
            line(&r, &mut out);
        }
        for f in &self.failures {
            let _ = writeln!(out, "FAILED {}: {}", f.scenario, f.error);
        }
        let _ = writeln!(
            out,
            "\n{} goals met, {} missed, {} scenarios failed to run",
            self.met(),
            self.missed(),
            self.failures.len()
        );
        out
    }
}

/// A value with its unit, at a precision that suits it.
pub fn with_unit(v: f64, unit: &str) -> String {
    let whole = unit.is_empty() && v.fract() == 0.0;
    let num = if whole || v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    match unit {
        "" | "×" => format!("{num}{unit}"),
        "%" => format!("{num} %"),
        _ => format!("{num} {unit}"),
    }
}

/// The `q`-quantile (0..=1) of `samples` by nearest rank; 0 when empty.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

/// Milliseconds in a duration, as a float.
pub fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&s, 0.5), 50.0);
        assert_eq!(quantile(&s, 0.99), 99.0);
        assert_eq!(quantile(&s, 1.0), 100.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }

    #[test]
    fn goals_mark_pass_and_miss() {
        let f = Figure::new("x", "ratio", 1.05, "×").goal(Goal::AtMost(1.10));
        assert_eq!(f.pass, Some(true));
        let f = Figure::new("x", "rate", 10.0, "/s").goal(Goal::AtLeast(20.0));
        assert_eq!(f.pass, Some(false));
    }
}
