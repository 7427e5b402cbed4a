//! SVG line charts of a run: series of (seconds, value) on one time axis, with markers (a phase
//! that begins, a fault, a kill) drawn as labelled vertical lines. `plotters` with its SVG
//! backend only: the text is written as SVG `<text>` for the viewer to set, so no font file or
//! font library is needed to draw.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

/// One line: its legend and its points (seconds since the run began, value).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A moment of the run marked on the time axis.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    /// Seconds since the run began.
    pub at: f64,
    pub label: String,
}

/// One picture.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    pub title: String,
    /// What the values are (the y axis's label).
    pub unit: String,
    pub series: Vec<Series>,
    pub markers: Vec<Marker>,
}

/// Why a picture was not drawn or written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("drawing the chart {title:?}: {message}")]
    Draw { title: String, message: String },
    #[error("writing the chart {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

const WIDTH: u32 = 900;
const HEIGHT: u32 = 420;
/// The plotting area's width: the picture's less the margins (12 px each side) and the y
/// axis's labels (60 px).
const PLOT_WIDTH: f64 = (WIDTH - 2 * 12 - 60) as f64;
/// A marker label's font size, and about how wide its characters are on average in a sans-serif
/// face (a bit over half the size), for telling whether two labels would overlap.
const MARKER_FONT: u32 = 12;
const MARKER_CHAR_WIDTH: f64 = 6.6;
/// Rows of marker labels below the top of the plot: labels too close to the previous one on a
/// row go to the next row down.
const MARKER_ROWS: usize = 5;

/// A line colour per series, told apart in print as on screen (the first is the palette's
/// blue, then orange, green, red...: Paul Tol's "bright" scheme).
const COLOURS: [RGBColor; 7] = [
    RGBColor(0x44, 0x77, 0xAA),
    RGBColor(0xEE, 0x66, 0x77),
    RGBColor(0x22, 0x88, 0x33),
    RGBColor(0xCC, 0xBB, 0x44),
    RGBColor(0x66, 0xCC, 0xEE),
    RGBColor(0xAA, 0x33, 0x77),
    RGBColor(0xBB, 0xBB, 0xBB),
];

/// Rounds `value` up to 1, 2 or 5 times a power of ten, for an axis that ends on a round number.
fn round_up(value: f64) -> f64 {
    if value <= 0.0 || !value.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|step| step * power)
        .find(|bound| *bound >= value)
        .unwrap_or(10.0 * power)
}

/// The chart as an SVG document.
pub fn svg(chart: &Chart) -> Result<String, PlotError> {
    let draw_error = |error: &dyn std::fmt::Display| PlotError::Draw {
        title: chart.title.clone(),
        message: error.to_string(),
    };
    let points = || chart.series.iter().flat_map(|s| s.points.iter());
    let x_end = round_up(
        points()
            .map(|(x, _)| *x)
            .chain(chart.markers.iter().map(|m| m.at))
            .fold(0.0, f64::max),
    );
    let y_end = round_up(points().map(|(_, y)| *y).fold(0.0, f64::max) * 1.1);
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_error(&e))?;
        let mut plot = ChartBuilder::on(&root)
            .caption(&chart.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_end, 0.0..y_end)
            .map_err(|e| draw_error(&e))?;
        plot.configure_mesh()
            .x_desc("seconds")
            .y_desc(chart.unit.as_str())
            .max_light_lines(0)
            .draw()
            .map_err(|e| draw_error(&e))?;
        let rows = label_rows(&chart.markers, x_end);
        for (marker, row) in chart.markers.iter().zip(rows) {
            let grey = RGBColor(0x88, 0x88, 0x88);
            plot.draw_series(LineSeries::new(
                [(marker.at, 0.0), (marker.at, y_end)],
                grey.stroke_width(1),
            ))
            .map_err(|e| draw_error(&e))?;
            plot.draw_series(std::iter::once(Text::new(
                marker.label.clone(),
                (marker.at, y_end * (0.98 - 0.06 * row as f64)),
                ("sans-serif", MARKER_FONT).into_font().color(&grey),
            )))
            .map_err(|e| draw_error(&e))?;
        }
        for (index, series) in chart.series.iter().enumerate() {
            let colour = COLOURS[index % COLOURS.len()];
            plot.draw_series(LineSeries::new(
                series.points.iter().copied(),
                colour.stroke_width(2),
            ))
            .map_err(|e| draw_error(&e))?
            .label(series.name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
        if !chart.series.is_empty() {
            plot.configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()
                .map_err(|e| draw_error(&e))?;
        }
        root.present().map_err(|e| draw_error(&e))?;
    }
    Ok(text)
}

/// The row of each marker's label (0 at the top), in the markers' order: in the order of time,
/// each label takes the first row where it starts after the previous label on it ends (widths
/// estimated from the characters, on an axis from 0 to `x_end`), else the row whose last label
/// ends first.
fn label_rows(markers: &[Marker], x_end: f64) -> Vec<usize> {
    let pixels_per_second = PLOT_WIDTH / x_end.max(f64::EPSILON);
    let mut order: Vec<usize> = (0..markers.len()).collect();
    order.sort_by(|a, b| markers[*a].at.total_cmp(&markers[*b].at));
    let mut row_ends = [f64::NEG_INFINITY; MARKER_ROWS];
    let mut rows = vec![0; markers.len()];
    for index in order {
        let marker = &markers[index];
        let start = marker.at * pixels_per_second;
        let end = start + (marker.label.chars().count() as f64 + 1.0) * MARKER_CHAR_WIDTH;
        let row = row_ends
            .iter()
            .position(|row_end| *row_end <= start)
            .unwrap_or_else(|| {
                (0..MARKER_ROWS)
                    .min_by(|a, b| row_ends[*a].total_cmp(&row_ends[*b]))
                    .unwrap_or(0)
            });
        row_ends[row] = end;
        rows[index] = row;
    }
    rows
}

/// Draws `chart` into `path`.
pub fn write(chart: &Chart, path: &Path) -> Result<(), PlotError> {
    let text = svg(chart)?;
    std::fs::write(path, text).map_err(|source| PlotError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Points per second from event times: counts in bins of `bin` seconds from 0 to `end`,
/// each divided by the bin's width, at the bin's middle.
pub fn rate(times: impl IntoIterator<Item = f64>, end: f64, bin: f64) -> Vec<(f64, f64)> {
    let bin = bin.max(f64::EPSILON);
    let bins = (end / bin).ceil().max(1.0) as usize;
    let mut counts = vec![0u64; bins];
    for at in times {
        if at >= 0.0 && at <= end {
            let index = ((at / bin) as usize).min(bins - 1);
            counts[index] += 1;
        }
    }
    counts
        .into_iter()
        .enumerate()
        .map(|(index, count)| ((index as f64 + 0.5) * bin, count as f64 / bin))
        .collect()
}

/// The same charts of several runs on the same axes: the series of `runs[i].1`'s chart `k`
/// named `<label>: <series>`, in one chart `k` (titles from the first run, markers from all,
/// labelled by run).
pub fn side_by_side(runs: &[(&str, Vec<Chart>)]) -> Vec<Chart> {
    let Some((_, first)) = runs.first() else {
        return Vec::new();
    };
    first
        .iter()
        .enumerate()
        .map(|(index, template)| {
            let mut chart = Chart {
                title: template.title.clone(),
                unit: template.unit.clone(),
                ..Chart::default()
            };
            for (label, charts) in runs {
                let Some(own) = charts.get(index) else {
                    continue;
                };
                chart.series.extend(own.series.iter().map(|series| Series {
                    name: format!("{label}: {}", series.name),
                    points: series.points.clone(),
                }));
                chart
                    .markers
                    .extend(own.markers.iter().map(|marker| Marker {
                        at: marker.at,
                        label: format!("{label}: {}", marker.label),
                    }));
            }
            chart
        })
        .collect()
}

/// The text of every `<text>` element of an SVG document (the title, the axes' labels, the
/// legend, the markers), trimmed, in order; an error if it is not well-formed XML.
pub fn svg_texts(svg: &str) -> Result<Vec<String>, quick_xml::Error> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut texts = Vec::new();
    let mut in_text = false;
    loop {
        let event = reader.read_event()?;
        let piece = match &event {
            Event::Start(start) if start.name().as_ref() == "text" => {
                in_text = true;
                texts.push(String::new());
                None
            }
            Event::End(end) if end.name().as_ref() == "text" => {
                in_text = false;
                None
            }
            Event::Text(text) if in_text => Some(text.xml10_content().into_owned()),
            // `&amp;` and the like come apart from the text around them.
            Event::GeneralRef(reference) if in_text => match reference.resolve_char_ref()? {
                Some(c) => Some(c.to_string()),
                None => {
                    let name = reference.xml10_content();
                    quick_xml::escape::resolve_predefined_entity(&name).map(str::to_owned)
                }
            },
            // The backend puts each text on a line of its own.
            Event::Eof => return Ok(texts.into_iter().map(|t| t.trim().to_owned()).collect()),
            _ => None,
        };
        if let (Some(piece), Some(last)) = (piece, texts.last_mut()) {
            last.push_str(&piece);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_well_formed_svg_with_its_title_legend_and_markers() {
        let chart = Chart {
            title: "Machines by phase".to_owned(),
            unit: "Machines".to_owned(),
            series: vec![
                Series {
                    name: "Running".to_owned(),
                    points: vec![(0.0, 0.0), (5.0, 3.0)],
                },
                Series {
                    name: "Provisioning & more".to_owned(),
                    points: vec![(0.0, 3.0), (5.0, 0.0)],
                },
            ],
            markers: vec![Marker {
                at: 2.5,
                label: "kill #1".to_owned(),
            }],
        };
        let texts = svg_texts(&svg(&chart).unwrap()).unwrap();
        for wanted in [
            "Machines by phase",
            "Running",
            "Provisioning & more",
            "kill #1",
            "seconds",
        ] {
            assert!(texts.iter().any(|t| t == wanted), "{wanted}: {texts:?}");
        }
    }

    #[test]
    fn marker_labels_close_in_time_go_to_rows_below_and_far_ones_share_the_top() {
        let marker = |at: f64, label: &str| Marker {
            at,
            label: label.to_owned(),
        };
        // On an axis of 100 s, 8.16 px a second: "scale-up" (5 s) ends at about 12 s, "kill
        // replica-1" (10 s) at about 22 s, so "apiserver" (12 s) takes the third row and "etcd"
        // (13 s) the first again.
        let markers = [
            marker(10.0, "kill replica-1"),
            marker(12.0, "apiserver"),
            marker(13.0, "etcd"),
            marker(50.0, "black hole"),
            marker(5.0, "scale-up"),
        ];
        assert_eq!(label_rows(&markers, 100.0), [1, 2, 0, 0, 0]);
        // More labels at one moment than rows: the row that frees first is reused.
        let crowded: Vec<Marker> = (0..MARKER_ROWS + 1).map(|_| marker(1.0, "kill")).collect();
        let rows = label_rows(&crowded, 100.0);
        assert_eq!(rows[..MARKER_ROWS], [0, 1, 2, 3, 4]);
        assert_eq!(rows[MARKER_ROWS], 0);
    }

    #[test]
    fn an_axis_ends_on_one_two_or_five_times_a_power_of_ten() {
        assert_eq!(round_up(0.0), 1.0);
        assert_eq!(round_up(0.7), 1.0);
        assert_eq!(round_up(13.0), 20.0);
        assert_eq!(round_up(201.0), 500.0);
        assert_eq!(round_up(1000.0), 1000.0);
    }

    #[test]
    fn a_rate_counts_events_per_second_of_each_bin() {
        let points = rate([0.1, 0.2, 1.5, 3.9, 7.0], 4.0, 2.0);
        assert_eq!(points, [(1.0, 1.5), (3.0, 0.5)]);
    }

    #[test]
    fn runs_side_by_side_share_one_chart_per_picture() {
        let chart = |value: f64| Chart {
            title: "Machines".to_owned(),
            unit: "Machines".to_owned(),
            series: vec![Series {
                name: "Running".to_owned(),
                points: vec![(0.0, value)],
            }],
            markers: vec![Marker {
                at: 1.0,
                label: "restart".to_owned(),
            }],
        };
        let [combined] = side_by_side(&[("ours", vec![chart(1.0)]), ("go", vec![chart(2.0)])])
            .try_into()
            .unwrap();
        let names: Vec<&str> = combined.series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["ours: Running", "go: Running"]);
        assert_eq!(combined.markers[1].label, "go: restart");
    }
}
