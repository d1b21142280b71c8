//! The files a run leaves in `--out`.
//!
//! - `timeline.csv`: `ms` (bucket start, from the clients' common start)
//!   and one column per variant of ops completed in the bucket;
//! - `timeline.png`: the same, smoothed over [`SMOOTH_BUCKETS`], a line per
//!   variant and a marker per fault;
//! - `history.jsonl`: every acknowledged write, `variant` added;
//! - `summary.json`: the [`Summary`].
//!
//! Each variant's directory keeps what its processes wrote (logs, history
//! per thread, the run spec).

use std::io::{BufWriter, Write as _};
use std::path::Path;

use super::check::read_history;
use super::{RunError, RunSpec, Summary};
use crate::plot::{render_png, Marker, Series, TimelinePlot};

/// Buckets averaged into one point of the plot: 1 ms buckets are noisy on
/// a shared machine; 10 ms still shows a repair's stall.
pub const SMOOTH_BUCKETS: usize = 10;
/// The plot's size in pixels.
pub const PLOT_WIDTH: u32 = 1200;
/// The plot's size in pixels.
pub const PLOT_HEIGHT: u32 = 600;

/// Writes every output of `summary` into `out`.
pub fn write_all(summary: &Summary, out: &Path) -> Result<(), RunError> {
    write_csv(summary, &out.join("timeline.csv"))?;
    write_png(summary, &out.join("timeline.png"))?;
    write_history(summary, out, &out.join("history.jsonl"))?;
    let path = out.join("summary.json");
    let json = serde_json::to_string_pretty(summary).map_err(RunError::json("summary.json"))?;
    std::fs::write(&path, json).map_err(|e| RunError::io(&path, e))
}

fn write_csv(summary: &Summary, path: &Path) -> Result<(), RunError> {
    let file = std::fs::File::create(path).map_err(|e| RunError::io(path, e))?;
    let mut w = BufWriter::new(file);
    let io = |e| RunError::io(path, e);
    write!(w, "ms").map_err(io)?;
    for v in &summary.variants {
        write!(w, ",{}", v.variant).map_err(io)?;
    }
    writeln!(w).map_err(io)?;
    let buckets = summary
        .variants
        .iter()
        .map(|v| v.timeline.len())
        .max()
        .unwrap_or(0);
    for b in 0..buckets {
        write!(w, "{}", b as f64 * summary.bucket_ms).map_err(io)?;
        for v in &summary.variants {
            write!(w, ",{}", v.timeline.get(b).copied().unwrap_or(0)).map_err(io)?;
        }
        writeln!(w).map_err(io)?;
    }
    w.flush().map_err(io)
}

fn write_png(summary: &Summary, path: &Path) -> Result<(), RunError> {
    let e = &summary.experiment;
    let series: Vec<Series> = summary
        .variants
        .iter()
        .map(|v| Series {
            label: v.variant.to_string(),
            ops_per_bucket: v.timeline.clone(),
        })
        .collect();
    let mut markers: Vec<Marker> = e
        .faults
        .iter()
        .map(|f| Marker {
            at_ms: f.at.as_secs_f64() * 1e3,
            label: match f.pause {
                Some(p) => format!("{} {} ({})", f.kind, f.client, humantime::format_duration(p)),
                None => format!("{} {}", f.kind, f.client),
            },
        })
        .collect();
    // dtx: when recovery rolled a dead client's logs (after its quarantine).
    for v in &summary.variants {
        for r in &v.dtx_rolled {
            markers.push(Marker {
                at_ms: r.rolled_at_ms,
                label: format!("{}: client {}'s logs rolled", v.variant, r.client),
            });
        }
    }
    let title = e.headline();
    render_png(
        path,
        &TimelinePlot {
            title: &title,
            bucket_ms: summary.bucket_ms,
            smooth_buckets: SMOOTH_BUCKETS,
            series: &series,
            markers: &markers,
        },
        PLOT_WIDTH,
        PLOT_HEIGHT,
    )?;
    Ok(())
}

fn write_history(summary: &Summary, out: &Path, path: &Path) -> Result<(), RunError> {
    let file = std::fs::File::create(path).map_err(|e| RunError::io(path, e))?;
    let mut w = BufWriter::new(file);
    let io = |e| RunError::io(path, e);
    for v in &summary.variants {
        let spec_path = out.join(v.variant.to_string()).join("run-spec.json");
        let spec = RunSpec::read(&spec_path)?;
        for write in read_history(&spec)? {
            let mut line = serde_json::to_value(write).map_err(RunError::json("a history line"))?;
            line["variant"] = serde_json::Value::String(v.variant.to_string());
            serde_json::to_writer(&mut w, &line).map_err(RunError::json("a history line"))?;
            writeln!(w).map_err(io)?;
        }
    }
    w.flush().map_err(io)
}
