//! The soak's curves as SVG, written by hand (no plotting dependency), in
//! the style of the benchmark's charts: the warm-up shaded, each fault a
//! red tick on the time axis, and the verdict's bound (the first third's
//! high, its 90th percentile, plus the allowance) dashed where there is one.

use std::fmt::Write;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

/// One chart.
pub struct Chart<'a> {
    /// The title.
    pub title: &'a str,
    /// The y axis' label.
    pub y_label: &'a str,
    /// Lines: a name and `(seconds, value)` points.
    pub lines: Vec<(String, Vec<(f64, f64)>)>,
    /// The end of the warm-up, seconds.
    pub warm_up: f64,
    /// When faults began, seconds.
    pub faults: Vec<f64>,
    /// The verdict's bound for a one-line chart.
    pub bound: Option<f64>,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A round top for an axis and its tick step.
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
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

impl Chart<'_> {
    /// The SVG document.
    pub fn svg(&self) -> String {
        let mut svg = String::new();
        let _ = write!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11"><rect width="100%" height="100%" fill="white"/><text x="{}" y="22" font-size="14" text-anchor="middle">{}</text>"#,
            (WIDTH - RIGHT + LEFT) / 2.0,
            escape(self.title)
        );
        let points = self.lines.iter().flat_map(|(_, p)| p.iter());
        let t_max = points.clone().map(|p| p.0).fold(0.0, f64::max).max(1.0);
        let v_max = points.map(|p| p.1).chain(self.bound).fold(0.0, f64::max);
        let (top, step) = nice_max(v_max * 1.05);
        let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
        let px = |t: f64| LEFT + t / t_max * plot_w;
        let py = |v: f64| HEIGHT - BOTTOM - v / top * plot_h;
        // The warm-up, shaded.
        let _ = write!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{plot_h}" fill="#f0f0f0"/><text x="{:.1}" y="{}" fill="#888" text-anchor="middle">warm-up</text>"##,
            px(self.warm_up) - LEFT,
            (LEFT + px(self.warm_up)) / 2.0,
            TOP + 14.0
        );
        let mut v = 0.0;
        while v <= top + step / 2.0 {
            let y = py(v);
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
            escape(self.y_label)
        );
        // The time axis, in minutes past 5 minutes.
        let (unit, label) = if t_max >= 300.0 {
            (60.0, "minutes")
        } else {
            (1.0, "seconds")
        };
        let (t_top, t_step) = nice_max(t_max / unit);
        let mut t = 0.0;
        while t <= t_top + t_step / 2.0 && t * unit <= t_max * 1.001 {
            let _ = write!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                px(t * unit),
                HEIGHT - BOTTOM + 16.0,
                number(t)
            );
            t += t_step;
        }
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{label} (red ticks: faults)</text>"#,
            LEFT + plot_w / 2.0,
            HEIGHT - BOTTOM + 36.0,
        );
        for fault in &self.faults {
            let x = px(*fault);
            let _ = write!(
                svg,
                r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#e15759" stroke-width="2"/>"##,
                HEIGHT - BOTTOM,
                HEIGHT - BOTTOM - 8.0
            );
        }
        if let Some(bound) = self.bound {
            let y = py(bound);
            let _ = write!(
                svg,
                r##"<line x1="{:.1}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#e15759" stroke-dasharray="6,4"/><text x="{}" y="{:.1}" fill="#e15759">leak bound</text>"##,
                px(self.warm_up),
                WIDTH - RIGHT,
                WIDTH - RIGHT + 6.0,
                y + 4.0
            );
        }
        for (i, (name, points)) in self.lines.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let path: Vec<String> = points
                .iter()
                .map(|(t, v)| format!("{:.1},{:.1}", px(*t), py(*v)))
                .collect();
            let _ = write!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"><title>{}</title></polyline>"#,
                path.join(" "),
                escape(name)
            );
            if self.lines.len() > 1 {
                let y = TOP + 10.0 + i as f64 * 18.0;
                let x = WIDTH - RIGHT + 14.0;
                let _ = write!(
                    svg,
                    r#"<rect x="{x}" y="{:.1}" width="12" height="12" fill="{color}"/><text x="{}" y="{y:.1}">{}</text>"#,
                    y - 10.0,
                    x + 18.0,
                    escape(name)
                );
            }
        }
        svg + "</svg>\n"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_is_well_formed_and_escaped() {
        let chart = Chart {
            title: "tasks <alive>",
            y_label: "tasks",
            lines: vec![
                ("a&b".into(), vec![(0.0, 1.0), (60.0, 3.0), (120.0, 2.0)]),
                ("c".into(), vec![(0.0, 2.0), (120.0, 2.0)]),
            ],
            warm_up: 30.0,
            faults: vec![60.0],
            bound: Some(4.0),
        };
        let svg = chart.svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("tasks &lt;alive&gt;") && svg.contains("a&amp;b"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("leak bound") && svg.contains("warm-up"));
        assert!(svg.contains("seconds"));
    }

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_max(7.3).0, 8.0);
        assert_eq!(nice_max(0.0), (1.0, 0.25));
        assert!(nice_max(1234.0).0 >= 1234.0);
    }
}
