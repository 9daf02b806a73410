//! SVG charts of a benchmark run, written beside `results.json`: plain SVG
//! by hand (no plotting dependency), readable in any browser and on GitHub.

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 110.0;
const COLORS: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// One line of a line chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn open(title: &str) -> String {
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#,
        (WIDTH - RIGHT + LEFT) / 2.0,
        escape(title)
    );
    svg
}

/// A "nice" upper bound for an axis and its tick step.
fn nice_max(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.25);
    }
    let magnitude = 10f64.powf(max.log10().floor());
    let step = [0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|s| s * magnitude)
        .find(|s| max / s <= 5.0)
        .unwrap_or(magnitude * 10.0);
    ((max / step).ceil() * step, step)
}

fn number(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn y_axis(svg: &mut String, y_label: &str, max: f64) -> f64 {
    let (top, step) = nice_max(max);
    let plot_h = HEIGHT - TOP - BOTTOM;
    let mut v = 0.0;
    while v <= top + step / 2.0 {
        let y = HEIGHT - BOTTOM - v / top * plot_h;
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            number(v)
        );
        v += step;
    }
    let _ = write!(
        svg,
        r#"<text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    top
}

fn legend(svg: &mut String, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 18.0;
        let x = WIDTH - RIGHT + 14.0;
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{}" y="{:.1}">{}</text>"#,
            y - 10.0,
            COLORS[i % COLORS.len()],
            x + 18.0,
            y,
            escape(&shorten(&compact(name), 26))
        );
    }
}

/// A store URL as a short label: scheme, first host, how many more hosts,
/// and the path when short ("zk://127.0.0.1:21811 +2", "sqlite:///tmp/b.db").
fn compact(store: &str) -> String {
    let Some((scheme, rest)) = store.split_once("://") else {
        return store.to_string();
    };
    // The query tells variants of one store apart (?mode=lockapi).
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, format!("?{query}")),
        None => (rest, String::new()),
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.is_empty() {
        return format!("{scheme}:///{path}{query}");
    }
    let hosts: Vec<&str> = authority
        .rsplit('@')
        .next()
        .unwrap_or_default()
        .split(',')
        .collect();
    let more = match hosts.len() {
        0 | 1 => String::new(),
        n => format!(" +{}", n - 1),
    };
    format!("{scheme}://{}{more}{query}", hosts[0])
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        text.chars().take(max - 1).collect::<String>() + "…"
    }
}

/// Grouped bars: one group per category (a store), one bar per series.
pub fn bars(
    title: &str,
    y_label: &str,
    series: &[String],
    groups: &[(String, Vec<f64>)],
) -> String {
    let mut svg = open(title);
    let max = groups
        .iter()
        .flat_map(|(_, values)| values.iter().copied())
        .fold(0.0, f64::max);
    let top = y_axis(&mut svg, y_label, max);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let group_w = plot_w / groups.len().max(1) as f64;
    let bar_w = (group_w * 0.8) / series.len().max(1) as f64;
    for (g, (category, values)) in groups.iter().enumerate() {
        let x0 = LEFT + g as f64 * group_w + group_w * 0.1;
        for (i, value) in values.iter().enumerate() {
            let h = value / top * plot_h;
            let _ = write!(
                svg,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                x0 + i as f64 * bar_w,
                HEIGHT - BOTTOM - h,
                bar_w * 0.95,
                COLORS[i % COLORS.len()],
                escape(&series[i]),
                number(*value)
            );
        }
        let cx = x0 + group_w * 0.4;
        let _ = write!(
            svg,
            r#"<text transform="translate({cx:.1},{:.1}) rotate(-30)" text-anchor="end">{}</text>"#,
            HEIGHT - BOTTOM + 14.0,
            escape(&shorten(&compact(category), 24))
        );
    }
    legend(&mut svg, series);
    svg + "</svg>\n"
}

/// Lines over a shared x axis (log scale when `log_x`).
pub fn lines(title: &str, x_label: &str, y_label: &str, series: &[Series], log_x: bool) -> String {
    let mut svg = open(title);
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let top = y_axis(&mut svg, y_label, ymax);
    let scale = |x: f64| if log_x { x.max(1e-9).ln() } else { x };
    let (xmin, xmax) = xs.iter().fold((f64::MAX, f64::MIN), |(lo, hi), x| {
        (lo.min(scale(*x)), hi.max(scale(*x)))
    });
    let span = if xmax > xmin { xmax - xmin } else { 1.0 };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let px = |x: f64| LEFT + 20.0 + (scale(x) - xmin) / span * (plot_w - 40.0);
    let py = |y: f64| HEIGHT - BOTTOM - y / top * plot_h;
    let mut ticks: Vec<f64> = xs.clone();
    ticks.sort_by(|a, b| a.total_cmp(b));
    ticks.dedup();
    for x in ticks {
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            px(x),
            HEIGHT - BOTTOM + 16.0,
            number(x)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - BOTTOM + 36.0,
        escape(x_label)
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let path: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        for (x, y) in &s.points {
            let _ = write!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{}: {} → {}</title></circle>"#,
                px(*x),
                py(*y),
                escape(&s.name),
                number(*x),
                number(*y)
            );
        }
    }
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    legend(&mut svg, &names);
    svg + "</svg>\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_and_escape_labels() {
        let svg = bars(
            "a <title>",
            "ms",
            &["floor".into(), "omnilock".into()],
            &[("redis://x&y".into(), vec![1.0, 1.2])],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt;title&gt;") && svg.contains("redis://x&amp;y"));
        assert_eq!(
            svg.matches("<rect x=").count(),
            4,
            "two bars and two legend keys"
        );
        let svg = lines(
            "t",
            "clients",
            "grants/s",
            &[Series {
                name: "s".into(),
                points: vec![(1.0, 10.0), (4.0, 30.0), (64.0, 20.0)],
            }],
            true,
        );
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn store_labels_are_compact_and_keep_no_credentials() {
        assert_eq!(
            compact("zk://127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813/omnilock"),
            "zk://127.0.0.1:21811 +2"
        );
        assert_eq!(
            compact("redis://:***@127.0.0.1:63790"),
            "redis://127.0.0.1:63790"
        );
        assert_eq!(compact("sqlite:///tmp/b.db"), "sqlite:///tmp/b.db");
        assert_eq!(compact("mem://x"), "mem://x");
        assert_eq!(
            compact("etcd://a:1,b:2/omnilock?mode=lockapi"),
            "etcd://a:1 +1?mode=lockapi"
        );
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_max(7.3).0, 8.0);
        assert_eq!(nice_max(0.0), (1.0, 0.25));
        assert!(nice_max(1234.0).0 >= 1234.0);
    }
}
