//! Charts drawn on the server as SVG (`templates/chart.html`): bars laid out here, as plain numbers.

use serde_json::Value;

/// Days a spend chart shows, today included.
pub const DAYS: usize = 14;
const WIDTH: u32 = 560;
const HEIGHT: u32 = 160;
/// Room under the bars for the day labels.
const LABELS: u32 = 20;

/// One bar, placed in the chart's coordinates: its series stacked from the bottom.
pub struct Bar {
    pub x: u32,
    pub width: u32,
    pub segments: Vec<Segment>,
    /// Under the bar (may be empty where bars are many), and its tooltip.
    pub label: String,
    pub tip: String,
}

/// One series' part of a bar.
pub struct Segment {
    pub y: u32,
    pub height: u32,
    /// Which series (its colour, `s0`, `s1`, ...).
    pub series: usize,
}

/// A bar chart, ready for the template.
pub struct BarChart {
    pub title: String,
    pub width: u32,
    pub height: u32,
    pub bars: Vec<Bar>,
    pub total: String,
    /// The series' names, where there is more than one.
    pub legend: Vec<&'static str>,
}

/// Money charged per day (`YYYY-MM-DD`, the gateway's local days) over the [`DAYS`] up to `today`, from
/// usage lines (their `at` and `charged`).
pub fn spend_per_day(lines: &[Value], today_ms: i64) -> Vec<(String, i64)> {
    let day_ms = 24 * 3600 * 1000;
    let mut days: Vec<(String, i64)> = (0..DAYS as i64)
        .rev()
        .map(|back| (crate::domain::clock::local_time(today_ms - back * day_ms).chars().take(10).collect(), 0))
        .collect();
    for line in lines {
        let (Some(at), Some(charged)) = (line["at"].as_str(), line["charged"].as_i64()) else { continue };
        if let Some((_, sum)) = days.iter_mut().find(|(day, _)| at.starts_with(day.as_str())) {
            *sum = sum.saturating_add(charged);
        }
    }
    days
}

/// Micro-units as money: two decimals at least, more where the amount has them (`1.50`, `0.025`), so a
/// price or a charge is never shown rounded.
pub fn money(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let micros = micros.unsigned_abs();
    let fraction = format!("{:06}", micros % 1_000_000);
    format!("{sign}{}.{:0<2}", micros / 1_000_000, fraction.trim_end_matches('0'))
}

/// Bars for `days` (labelled `MM-DD`), scaled to the largest, amounts as money.
pub fn spend_chart(title: &str, days: &[(String, i64)]) -> BarChart {
    let points: Vec<(String, i64)> = days.iter().map(|(day, v)| (day.chars().skip(5).collect(), *v)).collect();
    bars(title, &points, 1, money)
}

/// Bars for `points`, scaled to the largest, each value shown by `show`; every `label_every`th bar is
/// labelled (the last one always).
pub fn bars(title: &str, points: &[(String, i64)], label_every: usize, show: fn(i64) -> String) -> BarChart {
    let points: Vec<(String, Vec<i64>)> = points.iter().map(|(label, value)| (label.clone(), vec![*value])).collect();
    stacked(title, &[], &points, label_every, show)
}

/// Bars of several series stacked (`legend` names them), scaled to the tallest.
pub fn stacked(
    title: &str,
    legend: &[&'static str],
    points: &[(String, Vec<i64>)],
    label_every: usize,
    show: fn(i64) -> String,
) -> BarChart {
    let sum = |values: &[i64]| values.iter().fold(0i64, |sum, v| sum.saturating_add((*v).max(0)));
    let most = points.iter().map(|(_, values)| sum(values)).max().unwrap_or(0).max(1);
    let slot = WIDTH / points.len().max(1) as u32;
    let room = HEIGHT - LABELS;
    let scale = |value: i64| (value.max(0) as f64 / most as f64 * f64::from(room - 4)).round() as u32;
    let last = points.len().saturating_sub(1);
    let bars = points
        .iter()
        .enumerate()
        .map(|(index, (label, values))| {
            let mut top = room;
            let segments = values
                .iter()
                .enumerate()
                .map(|(series, value)| {
                    let height = scale(*value).min(top);
                    top -= height;
                    Segment { y: top, height, series }
                })
                .collect();
            let labelled = index == last || (last - index).is_multiple_of(label_every.max(1));
            let shown: Vec<String> = values.iter().map(|v| show(*v)).collect();
            Bar {
                x: index as u32 * slot + 2,
                width: slot.saturating_sub(4),
                segments,
                label: if labelled { label.clone() } else { String::new() },
                tip: format!("{label}: {}", shown.join(" · ")),
            }
        })
        .collect();
    let total = points.iter().fold(0i64, |total, (_, values)| total.saturating_add(sum(values)));
    BarChart {
        title: title.to_string(),
        width: WIDTH,
        height: HEIGHT,
        bars,
        total: show(total),
        legend: legend.to_vec(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn spend_is_summed_per_day_and_scaled_to_the_largest() {
        let today = 1_795_000_000_000;
        let day = |back: i64| crate::domain::clock::local_time(today - back * 86_400_000);
        let lines = [
            json!({"at": day(0), "charged": 1_500_000}),
            json!({"at": day(0), "charged": 500_000}),
            json!({"at": day(2), "charged": 1_000_000}),
            json!({"at": day(40), "charged": 9_000_000}),
        ];
        let days = spend_per_day(&lines, today);
        assert_eq!(days.len(), DAYS);
        assert_eq!(days[DAYS - 1].1, 2_000_000);
        assert_eq!(days[DAYS - 3].1, 1_000_000);
        let chart = spend_chart("Spend", &days);
        assert_eq!(chart.total, "3.00");
        let height = |bar: &Bar| bar.segments.iter().map(|s| s.height).sum::<u32>();
        assert_eq!(height(&chart.bars[DAYS - 1]), HEIGHT - LABELS - 4);
        assert_eq!(height(&chart.bars[DAYS - 3]), (HEIGHT - LABELS - 4) / 2);
        assert_eq!(height(&chart.bars[0]), 0);
        let stacked = stacked("Tasks", &["ok", "not"], &[("a".into(), vec![3, 1]), ("b".into(), vec![2, 0])], 1, |n| {
            n.to_string()
        });
        let a = &stacked.bars[0].segments;
        assert_eq!(
            (a[0].height, a[1].height),
            (HEIGHT - LABELS - 4 - (HEIGHT - LABELS - 4) / 4, (HEIGHT - LABELS - 4) / 4)
        );
        assert_eq!(a[1].y + a[1].height, a[0].y, "the second series sits on the first");
        assert_eq!((stacked.total.as_str(), stacked.bars[0].tip.as_str()), ("6", "a: 3 · 1"));
        assert_eq!(
            (money(-1_234_567), money(-10_000), money(150_000)),
            ("-1.234567".into(), "-0.01".into(), "0.15".into())
        );
    }
}
