//! Throughput timelines rendered to PNG: one line per series, a dashed
//! vertical line per fault marker.
//!
//! Text uses DejaVu Sans compiled into the binary (`assets/`, licence beside
//! it), so rendering needs no system fonts or fontconfig.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ab_glyph::{point, Font, FontRef, ScaleFont};
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// One line of the plot: ops completed per bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    /// Legend entry for this line.
    pub label: String,
    /// Ops completed in each consecutive bucket, starting at 0 ms.
    pub ops_per_bucket: Vec<u64>,
}

/// A vertical marker (a fault) at a time.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// When the fault happened, in milliseconds since the first bucket began.
    pub at_ms: f64,
    /// Text written beside the marker near the top of the plot.
    pub label: String,
}

/// What to draw.
#[derive(Debug, Clone, Copy)]
pub struct TimelinePlot<'a> {
    /// Caption at the top of the image.
    pub title: &'a str,
    /// Width of one bucket in milliseconds (buckets start at 0 ms).
    pub bucket_ms: f64,
    /// Buckets averaged into one plotted point (1 = raw; 0 is taken as 1); the
    /// plotted y is ops/s (ops in the averaged buckets / their total width).
    pub smooth_buckets: usize,
    /// The lines, drawn in order with a fixed colour cycle.
    pub series: &'a [Series],
    /// Faults to mark.
    pub markers: &'a [Marker],
}

/// Why a plot could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// There is nothing to draw a legend for.
    #[error("a timeline plot needs at least one series")]
    NoSeries,
    /// Zero-sized, or too large to allocate a pixel buffer for.
    #[error("image size {width}x{height} is outside 1..={MAX_SIDE} pixels per side")]
    BadSize {
        /// Requested width.
        width: u32,
        /// Requested height.
        height: u32,
    },
    /// The bucket width is zero, negative or not finite.
    #[error("bucket width must be a positive number of milliseconds, got {0}")]
    BadBucketWidth(f64),
    /// A marker time is negative or not finite.
    #[error("marker {label:?} is at {at_ms} ms, outside the timeline")]
    BadMarker {
        /// The marker's label.
        label: String,
        /// Its time.
        at_ms: f64,
    },
    /// The encoder picks the format from the extension, so anything else
    /// would silently produce another format or fail late.
    #[error("{0} does not end in .png")]
    NotPngPath(PathBuf),
    /// The embedded font was rejected by the rasteriser.
    #[error("the embedded font could not be loaded")]
    Font,
    /// Drawing or writing the file failed (including I/O errors).
    #[error("drawing the plot failed: {0}")]
    Draw(String),
}

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for PlotError {
    fn from(e: DrawingAreaErrorKind<E>) -> Self {
        PlotError::Draw(e.to_string())
    }
}

/// plotters-bitmap computes `w * h` in `u32`; this bound keeps that and the
/// buffer (3 bytes per pixel) well clear of overflow.
const MAX_SIDE: u32 = 16_384;
const FONT_NAME: &str = "sans-serif";
static FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
// Tableau 10: distinguishable on screen and in greyscale print.
const PALETTE: [u32; 10] = [
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf,
];
const MARKER_COLOUR: RGBColor = RGBColor(60, 60, 60);

fn colour(series: usize) -> RGBColor {
    let c = PALETTE[series % PALETTE.len()];
    RGBColor((c >> 16) as u8, (c >> 8) as u8, c as u8)
}

/// The font for our own text, also registered with plotters for the tick
/// labels (under its default family name, so nothing it draws lacks a font).
fn font() -> Result<&'static FontRef<'static>, PlotError> {
    static FONT: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    let font = FONT.get_or_init(|| {
        let registered = register_font(FONT_NAME, FontStyle::Normal, FONT_TTF).is_ok();
        FontRef::try_from_slice(FONT_TTF).ok().filter(|_| registered)
    });
    font.as_ref().ok_or(PlotError::Font)
}

/// Text we lay out ourselves: plotters' ab_glyph path drops each glyph's left
/// side bearing and truncates the pen, so "client" comes out as "dient".
struct Pen<'a, DB: DrawingBackend> {
    area: &'a DrawingArea<DB, Shift>,
    font: &'a FontRef<'static>,
}

impl<DB: DrawingBackend> Pen<'_, DB> {
    fn width(&self, size: f32, text: &str) -> f32 {
        let f = self.font.as_scaled(size);
        let mut prev = None;
        let advance = |id| f.h_advance(id) + prev.replace(id).map_or(0.0, |p| f.kern(p, id));
        text.chars().map(|c| f.glyph_id(c)).map(advance).sum()
    }

    /// `align` is the fraction of the text's (width, height) that lies before
    /// `at`; `up` turns the text to read bottom to top.
    fn text(
        &self,
        text: &str,
        (size, colour): (f32, RGBColor),
        at: (i32, i32),
        align: (f32, f32),
        up: bool,
    ) -> Result<(), PlotError> {
        let f = self.font.as_scaled(size);
        let mut caret = -align.0 * self.width(size, text);
        let baseline = f.ascent() - align.1 * f.height();
        let (mut prev, mut pixels) = (None, Vec::new());
        for id in text.chars().map(|c| f.glyph_id(c)) {
            caret += prev.replace(id).map_or(0.0, |p| f.kern(p, id));
            let glyph = id.with_scale_and_position(size, point(caret, baseline));
            caret += f.h_advance(id);
            if let Some(outline) = self.font.outline_glyph(glyph) {
                let b = outline.px_bounds();
                let (bx, by) = (b.min.x as i32, b.min.y as i32);
                outline.draw(|x, y, c| pixels.push((bx + x as i32, by + y as i32, c.min(1.0))));
            }
        }
        for (u, v, c) in pixels {
            let p = if up {
                (at.0 + v, at.1 - u)
            } else {
                (at.0 + u, at.1 + v)
            };
            self.area.draw_pixel(p, &colour.mix(f64::from(c)))?;
        }
        Ok(())
    }
}

/// `(time_s, ops_per_s)` per window, x at the window's midpoint; a short
/// final window is divided by its own width so it does not dip artificially.
fn points(ops: &[u64], bucket_ms: f64, smooth: usize) -> Vec<(f64, f64)> {
    let window = |(i, w): (usize, &[u64])| {
        let width_s = w.len() as f64 * bucket_ms / 1e3;
        let start_s = (i * smooth) as f64 * bucket_ms / 1e3;
        let total: f64 = w.iter().map(|&v| v as f64).sum();
        (start_s + width_s / 2.0, total / width_s)
    };
    ops.chunks(smooth).enumerate().map(window).collect()
}

/// Divisor and unit that keep the axis numbers short.
fn unit_for(max_ops_per_s: f64) -> (f64, &'static str) {
    match max_ops_per_s {
        y if y >= 1e6 => (1e6, "Mops/s"),
        y if y >= 1e3 => (1e3, "kops/s"),
        _ => (1.0, "ops/s"),
    }
}

fn check(plot: &TimelinePlot<'_>, path: &Path, width: u32, height: u32) -> Result<(), PlotError> {
    if plot.series.is_empty() {
        return Err(PlotError::NoSeries);
    }
    if !(1..=MAX_SIDE).contains(&width) || !(1..=MAX_SIDE).contains(&height) {
        return Err(PlotError::BadSize { width, height });
    }
    if !(plot.bucket_ms.is_finite() && plot.bucket_ms > 0.0) {
        return Err(PlotError::BadBucketWidth(plot.bucket_ms));
    }
    let bad = |m: &&Marker| !(m.at_ms.is_finite() && m.at_ms >= 0.0);
    if let Some(Marker { at_ms, label }) = plot.markers.iter().find(bad).cloned() {
        return Err(PlotError::BadMarker { label, at_ms });
    }
    if !path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        return Err(PlotError::NotPngPath(path.to_path_buf()));
    }
    Ok(())
}

/// Writes `plot` as a PNG of `width` x `height` pixels at `path`, which must
/// end in `.png`.
pub fn render_png(path: &Path, plot: &TimelinePlot<'_>, width: u32, height: u32) -> Result<(), PlotError> {
    check(plot, path, width, height)?;
    let font = font()?;
    let smooth = plot.smooth_buckets.max(1);
    let to_points = |s: &Series| points(&s.ops_per_bucket, plot.bucket_ms, smooth);
    let lines: Vec<_> = plot.series.iter().map(to_points).collect();
    let max_y = lines.iter().flatten().map(|p| p.1).fold(0.0, f64::max);
    let (div, unit) = unit_for(max_y);
    let longest = plot.series.iter().map(|s| s.ops_per_bucket.len()).max();
    let data_end_s = longest.unwrap_or(0) as f64 * plot.bucket_ms / 1e3;
    let marker_s = plot.markers.iter().map(|m| m.at_ms / 1e3);
    let end_s = marker_s.fold(data_end_s, f64::max);
    // Non-degenerate ranges even for empty or all-zero data; the y headroom
    // keeps marker labels clear of the lines.
    let x_max = if end_s > 0.0 { end_s } else { 1.0 };
    let y_max = if max_y > 0.0 { max_y / div * 1.2 } else { 1.0 };

    // Sizes follow the image so thumbnails and large renders both stay legible.
    let s = (width.min(height) as f32 / 500.0).clamp(0.8, 4.0);
    let px = |v: f32| (v * s).round() as i32;
    let stroke = |v: f32| px(v).max(1) as u32;
    let (big, medium, small) = ((22.0 * s, BLACK), (16.0 * s, BLACK), (13.0 * s, BLACK));
    let root = BitMapBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let pen = Pen { area: &root, font };

    // The legend has its own strip under the chart so it never hides data or
    // marker labels; entries wrap onto more rows when they do not fit.
    let (swatch, row_h) = (px(24.0), px(22.0));
    let (mut x, mut row, mut entries) = (px(12.0), 0, Vec::new());
    for series in plot.series {
        let w = pen.width(small.0, &series.label) as i32 + swatch + px(6.0);
        if x > px(12.0) && x + w > width as i32 - px(12.0) {
            (x, row) = (px(12.0), row + 1);
        }
        entries.push((x, row));
        x += w + px(18.0);
    }
    let upper_h = (height as i32 - (row + 1) * row_h - px(8.0)).max(0);
    let (upper, _) = root.split_vertically(upper_h);

    let tick_font = TextStyle::from((FONT_NAME, f64::from(small.0)).into_font());
    let mut chart = ChartBuilder::on(&upper)
        .margin_top(px(14.0) + font.as_scaled(big.0).height() as i32)
        .margin_right(px(24.0))
        .margin_left(px(8.0))
        .x_label_area_size(px(30.0) + medium.0 as i32)
        .y_label_area_size(px(50.0) + medium.0 as i32)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    let grid = RGBColor(238, 238, 238);
    let mut mesh = chart.configure_mesh();
    mesh.label_style(tick_font).light_line_style(grid).draw()?;
    for (i, line) in lines.iter().enumerate() {
        let scaled = line.iter().map(|&(x, y)| (x, y / div));
        chart.draw_series(LineSeries::new(scaled, colour(i).stroke_width(stroke(2.0))))?;
    }

    let (x_px, y_px) = chart.plotting_area().get_pixel_range();
    let centre = ((x_px.start + x_px.end) / 2, (y_px.start + y_px.end) / 2);
    pen.text(plot.title, big, (width as i32 / 2, px(8.0)), (0.5, 0.0), false)?;
    let under = (centre.0, upper_h - px(6.0));
    pen.text("time (s)", medium, under, (0.5, 1.0), false)?;
    let y_desc = format!("throughput ({unit})");
    pen.text(&y_desc, medium, (px(8.0), centre.1), (0.5, 0.0), true)?;

    let dash = MARKER_COLOUR.stroke_width(stroke(1.5));
    let mut order: Vec<&Marker> = plot.markers.iter().collect();
    order.sort_by(|a, b| a.at_ms.total_cmp(&b.at_ms));
    for at in order.iter().map(|m| m.at_ms / 1e3) {
        let line = [(at, y_max), (at, 0.0)];
        chart.draw_series([DashedPathElement::new(line, px(6.0), px(4.0), dash)])?;
    }
    // Each label takes the first of three rows where it clears the previous
    // label, so crowded markers stack instead of overprinting; a white box
    // keeps it readable across other markers' lines.
    let label_h = font.as_scaled(small.0).height() as i32;
    let mut row_ends = [i32::MIN; 3];
    for m in order {
        let mx = chart.backend_coord(&(m.at_ms / 1e3, y_max)).0;
        let w = pen.width(small.0, &m.label) as i32;
        // Labels that would run off the right edge sit left of their line.
        let right_side = mx + px(5.0) + w <= x_px.end;
        let left = mx + if right_side { px(5.0) } else { -px(5.0) - w };
        let free = row_ends.iter().position(|&end| end + px(6.0) < left);
        let row = free.unwrap_or(row_ends.len() - 1);
        row_ends[row] = left + w;
        let top = y_px.start + px(4.0) + row as i32 * (label_h + px(3.0));
        let bg = [(left - px(2.0), top), (left + w + px(2.0), top + label_h)];
        root.draw(&Rectangle::new(bg, WHITE.mix(0.85).filled()))?;
        pen.text(&m.label, (small.0, MARKER_COLOUR), (left, top), (0.0, 0.0), false)?;
    }

    for (i, ((x, row), series)) in entries.into_iter().zip(plot.series).enumerate() {
        let y = upper_h + px(4.0) + row * row_h + row_h / 2;
        let line = PathElement::new([(x, y), (x + swatch, y)], colour(i).stroke_width(stroke(3.0)));
        root.draw(&line)?;
        pen.text(&series.label, small, (x + swatch + px(6.0), y), (0.0, 0.5), false)?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(label: &str, ops_per_bucket: Vec<u64>) -> Series {
        Series {
            label: label.into(),
            ops_per_bucket,
        }
    }

    fn marker(at_ms: f64, label: &str) -> Marker {
        Marker {
            at_ms,
            label: label.into(),
        }
    }

    fn plot<'a>(series: &'a [Series], markers: &'a [Marker]) -> TimelinePlot<'a> {
        let (title, bucket_ms, smooth_buckets) = ("test", 10.0, 5);
        TimelinePlot {
            title,
            bucket_ms,
            smooth_buckets,
            series,
            markers,
        }
    }

    /// Width and height from the IHDR chunk, which PNG requires to come first.
    fn png_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).unwrap();
        assert!(bytes.len() > 24, "file too short for a PNG header");
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&bytes[12..16], b"IHDR");
        let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        (be(16), be(20))
    }

    #[test]
    fn two_series_with_markers_render_at_requested_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timeline.png");
        let a = (0..400u64).map(|i| 20_000 + (i * 37) % 3_000).collect();
        let b = (0..400u64).map(|i| if (150..200).contains(&i) { 0 } else { 15_000 });
        let s = [series("primary", a), series("backup", b.collect())];
        let m = [marker(1500.0, "crash MN 1"), marker(2000.0, "recovered")];
        render_png(&path, &plot(&s, &m), 640, 360).unwrap();
        assert_eq!(png_size(&path), (640, 360));
    }

    #[test]
    fn empty_and_all_zero_series_still_render() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty.png");
        let s = [series("nothing", vec![]), series("zeros", vec![0; 7])];
        render_png(&path, &plot(&s, &[marker(0.0, "at zero")]), 300, 200).unwrap();
        assert_eq!(png_size(&path), (300, 200));
    }

    #[test]
    fn no_series_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = render_png(&dir.path().join("x.png"), &plot(&[], &[]), 100, 100).unwrap_err();
        assert!(matches!(err, PlotError::NoSeries), "{err}");
    }

    #[test]
    fn zero_size_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.png");
        let s = [series("a", vec![1, 2, 3])];
        for (w, h) in [(0, 100), (100, 0), (0, 0)] {
            let err = render_png(&path, &plot(&s, &[]), w, h).unwrap_err();
            assert!(matches!(err, PlotError::BadSize { .. }), "{err}");
        }
        assert!(!path.exists());
    }

    #[test]
    fn smoothing_reports_ops_per_second_over_the_window() {
        // 10 ms buckets: 30 ops in 30 ms is 1000 ops/s; the short tail
        // window is divided by its own 10 ms.
        let p = points(&[10, 10, 10, 5], 10.0, 3);
        let want = [(0.015, 1000.0), (0.035, 500.0)];
        assert_eq!(p.len(), want.len());
        for (got, want) in p.iter().zip(want) {
            assert!(
                (got.0 - want.0).abs() < 1e-12 && (got.1 - want.1).abs() < 1e-9,
                "{p:?}"
            );
        }
        assert_eq!(unit_for(2.5e6).1, "Mops/s");
        assert_eq!(unit_for(999.0).1, "ops/s");
    }
}
