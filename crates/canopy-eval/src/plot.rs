//! The figures' plots, as PNG and SVG, drawn with plotters and a font built
//! into the binary (DejaVu Sans), so no system font is needed.
//!
//! Two kinds: panels of grouped bars (a group per tree shape or percentile, a
//! bar per mode) and lines (a value against the number of servers, a line per
//! mode). Every plot has a title, labelled axes with units, and a legend.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

/// One panel of grouped bars: `values[s][g]` is series s in group g.
pub struct Bars {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub values: Vec<Vec<f64>>,
    /// A logarithmic value axis (latencies spanning microseconds to seconds).
    pub log: bool,
}

/// Lines against the number of servers: `values[s][i]` is series s at `xs[i]`.
pub struct Lines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub xs: Vec<u32>,
    pub values: Vec<Vec<f64>>,
}

const PALETTE: [RGBColor; 6] = [RGBColor(31, 119, 180), RGBColor(255, 127, 14), RGBColor(44, 160, 44), RGBColor(214, 39, 40), RGBColor(148, 103, 189), RGBColor(140, 86, 75)];
const FONT: &str = "sans-serif";

fn color(s: usize) -> RGBColor {
    PALETTE[s % PALETTE.len()]
}

/// Registers the built-in font under the family the plots name.
fn font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_err() {
            eprintln!("canopy eval: the built-in font did not load; plots will have no text");
        }
    });
}

type PlotResult = Result<(), String>;

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// Writes `base`.png and `base`.svg of `title` over side-by-side `panels`,
/// bars labelled by `series` (the legend).
pub fn bar_panels(base: &Path, title: &str, series: &[String], panels: &[Bars]) -> PlotResult {
    font();
    let width = 520 * panels.len().max(1) as u32;
    let png = base.with_extension("png");
    let svg = base.with_extension("svg");
    draw_bar_panels(BitMapBackend::new(&png, (width, 480)).into_drawing_area(), title, series, panels)?;
    draw_bar_panels(SVGBackend::new(&svg, (width, 480)).into_drawing_area(), title, series, panels)
}

/// Writes `base`.png and `base`.svg of `plot`, a line per entry of `series`.
pub fn lines(base: &Path, series: &[String], plot: &Lines) -> PlotResult {
    font();
    let png = base.with_extension("png");
    let svg = base.with_extension("svg");
    draw_lines(BitMapBackend::new(&png, (720, 480)).into_drawing_area(), series, plot)?;
    draw_lines(SVGBackend::new(&svg, (720, 480)).into_drawing_area(), series, plot)
}

fn draw_bar_panels<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, series: &[String], panels: &[Bars]) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, (FONT, 22)).map_err(err)?;
    let areas = root.split_evenly((1, panels.len().max(1)));
    for (area, panel) in areas.iter().zip(panels) {
        draw_bars(area, series, panel)?;
    }
    root.present().map_err(err)
}

/// The share of a plot's height, from its top, that the legend box of
/// `series` entries takes (13-point labels, about 19 pixels an entry, and
/// its border), in a plot `plot_px` pixels high; at most 0.6.
fn legend_share(series: usize, plot_px: u32) -> f64 {
    ((series as f64 * 19.0 + 16.0) / plot_px.max(1) as f64).min(0.6)
}

/// The top of a linear axis whose highest bar or point is `max`, so that
/// everything drawn stays below the legend's `share` of the height.
fn linear_top(max: f64, share: f64) -> f64 {
    if max > 0.0 {
        max / (1.0 - share)
    } else {
        1.0
    }
}

/// The top of a log axis from `low` whose highest bar is `max`, so that the
/// bars stay below the legend's `share` of the height (at least a decade
/// above `low`).
fn log_top(max: f64, low: f64, share: f64) -> f64 {
    let decades = (max / low).log10().max(0.0);
    (max * 10f64.powf(decades * share / (1.0 - share)) * 1.1).max(low * 10.0)
}

/// How many pixels high the plot itself is in `area`, less the caption, the
/// labels under it and the margins (`below`: the x label area's size).
fn plot_px<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, below: u32, margins: u32, caption: u32) -> u32 {
    area.dim_in_pixel().1.saturating_sub(below + margins + caption)
}

fn draw_bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, series: &[String], p: &Bars) -> PlotResult
where
    DB::ErrorType: 'static,
{
    let n = p.groups.len().max(1);
    let max = p.values.iter().flatten().copied().fold(0.0, f64::max);
    let x_range = -0.5f64..n as f64 - 0.5;
    let groups = p.groups.clone();
    let x_fmt = move |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < groups.len() {
            groups[i as usize].clone()
        } else {
            String::new()
        }
    };
    // Whole numbers on an axis that reaches 100, two decimals on one that does not.
    let y_fmt = move |v: &f64| if max >= 100.0 { format!("{v:.0}") } else { format!("{v:.2}") };
    let share = legend_share(series.len(), plot_px(area, 40, 24, 30));
    let width = 0.8 / series.len().max(1) as f64;
    let bar = |s: usize, g: usize| (g as f64 - 0.4 + s as f64 * width, g as f64 - 0.4 + (s as f64 + 1.0) * width);
    if p.log {
        let min = p.values.iter().flatten().copied().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        let low = if min.is_finite() { min / 2.0 } else { 1.0 };
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, (FONT, 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range, (low..log_top(max, low, share)).log_scale())
            .map_err(err)?;
        chart.configure_mesh().disable_x_mesh().x_labels(n + 1).x_label_formatter(&x_fmt).y_label_formatter(&y_fmt).y_desc(p.y_label.as_str()).label_style((FONT, 13)).axis_desc_style((FONT, 14)).draw().map_err(err)?;
        for (s, name) in series.iter().enumerate() {
            let rects = p.values.get(s).into_iter().flatten().enumerate().filter(|(_, v)| **v > 0.0).map(|(g, v)| {
                let (x0, x1) = bar(s, g);
                Rectangle::new([(x0, low), (x1, *v)], color(s).filled())
            });
            chart.draw_series(rects).map_err(err)?.label(name.as_str()).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color(s).filled()));
        }
        legend(&mut chart)
    } else {
        let mut chart = ChartBuilder::on(area)
            .caption(&p.title, (FONT, 16))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x_range, 0f64..linear_top(max, share))
            .map_err(err)?;
        chart.configure_mesh().disable_x_mesh().x_labels(n + 1).x_label_formatter(&x_fmt).y_label_formatter(&y_fmt).y_desc(p.y_label.as_str()).label_style((FONT, 13)).axis_desc_style((FONT, 14)).draw().map_err(err)?;
        for (s, name) in series.iter().enumerate() {
            let rects = p.values.get(s).into_iter().flatten().enumerate().map(|(g, v)| {
                let (x0, x1) = bar(s, g);
                Rectangle::new([(x0, 0.0), (x1, *v)], color(s).filled())
            });
            chart.draw_series(rects).map_err(err)?.label(name.as_str()).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color(s).filled()));
        }
        legend(&mut chart)
    }
}

fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(chart: &mut ChartContext<'a, DB, CT>) -> PlotResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT, 13))
        .draw()
        .map_err(err)
}

fn draw_lines<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, series: &[String], p: &Lines) -> PlotResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(err)?;
    let max = p.values.iter().flatten().copied().fold(0.0, f64::max);
    // The sizes (8, 16, ... 128: each double the last) at even spacing, as on
    // a log axis, each labelled with its value.
    let k = p.xs.len().max(1);
    let share = legend_share(series.len(), plot_px(&root, 45, 32, 34));
    let mut chart = ChartBuilder::on(&root)
        .caption(&p.title, (FONT, 20))
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.3f64..k as f64 - 0.7, 0f64..linear_top(max, share))
        .map_err(err)?;
    let xs = p.xs.clone();
    let x_fmt = move |v: &f64| {
        let i = v.round();
        if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < xs.len() {
            xs[i as usize].to_string()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .max_light_lines(0)
        .x_labels(k)
        .x_desc(p.x_label.as_str())
        .y_desc(p.y_label.as_str())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 15))
        .draw()
        .map_err(err)?;
    for (s, name) in series.iter().enumerate() {
        let points: Vec<(f64, f64)> = p.values.get(s).into_iter().flatten().enumerate().map(|(i, &y)| (i as f64, y)).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color(s).stroke_width(2)))
            .map_err(err)?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color(s).stroke_width(2)));
        chart.draw_series(points.into_iter().map(|pt| Circle::new(pt, 4, color(s).filled()))).map_err(err)?;
    }
    legend(&mut chart)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the top of the highest bar falls, as a share of the height
    /// from the bottom, on a linear and on a log axis.
    fn linear_height(max: f64, top: f64) -> f64 {
        max / top
    }
    fn log_height(max: f64, low: f64, top: f64) -> f64 {
        (max / low).log10() / (top / low).log10()
    }

    #[test]
    fn the_highest_bar_stays_below_the_legend() {
        for series in [1, 2, 5, 8] {
            let share = legend_share(series, 340);
            assert!(share > 0.0 && share <= 0.6);
            for max in [0.5, 7.0, 1_000.0, 2.5e6] {
                assert!(linear_height(max, linear_top(max, share)) <= 1.0 - share + 1e-9, "{series} series, max {max}");
                for low in [0.01, 1.0, 75.0] {
                    if max > low {
                        let top = log_top(max, low, share);
                        assert!(log_height(max, low, top) <= 1.0 - share + 1e-9, "{series} series, max {max}, low {low}");
                        assert!(top >= low * 10.0);
                    }
                }
            }
        }
        // More entries take more of the height.
        assert!(legend_share(5, 340) > legend_share(2, 340));
    }

    #[test]
    fn plots_are_written_as_png_and_svg_with_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let series = vec!["shardfs".to_string(), "indexfs".to_string()];
        let panel = |log| Bars { title: "creates".into(), y_label: "ops/s per server".into(), groups: vec!["balanced".into(), "zipfian".into()], values: vec![vec![10.0, 20.0], vec![5.0, 0.0]], log };
        bar_panels(&dir.path().join("fig6a"), "Figure 6a", &series, &[panel(false), panel(true)]).unwrap();
        let line = Lines { title: "Figure 7a".into(), x_label: "servers".into(), y_label: "ops/s".into(), xs: vec![8, 16, 32], values: vec![vec![1.0, 2.0, 3.0], vec![1.0, 1.5, 1.7]] };
        lines(&dir.path().join("fig7a"), &series, &line).unwrap();
        for name in ["fig6a.png", "fig7a.png"] {
            let bytes = std::fs::read(dir.path().join(name)).unwrap();
            assert_eq!(&bytes[1..4], b"PNG", "{name}");
        }
        let svg = std::fs::read_to_string(dir.path().join("fig6a.svg")).unwrap();
        for text in ["Figure 6a", "ops/s per server", "balanced", "shardfs", "indexfs"] {
            assert!(svg.contains(text), "the SVG has {text:?}");
        }
        let svg = std::fs::read_to_string(dir.path().join("fig7a.svg")).unwrap();
        assert!(svg.contains("servers") && svg.contains("16"));
    }
}
