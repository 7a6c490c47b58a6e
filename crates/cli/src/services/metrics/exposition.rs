//! A metrics exposition — families of series — and its two text encodings: the Prometheus text
//! format (version 0.0.4, `text/plain`), which the node exporter's textfile collector and the
//! classic parsers read, and OpenMetrics 1.0 (`application/openmetrics-text`). The two name a
//! counter's family differently — the first types `x_total`, the sample's own name; OpenMetrics
//! types `x` and suffixes its samples — so one text cannot be read right by both.
//!
//! Families come out sorted by name, and each family's series by their labels, so the same
//! exposition is always the same bytes; a family with no series is left out, as is a label
//! whose value is empty. A long-lived
//! endpoint keeps every series it once served ([`Seen`]): one that is gone reads 0.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use hermes_ledger::Buckets;

/// How an exposition is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The Prometheus text format, version 0.0.4 (`text/plain`), which the node exporter's
    /// textfile collector reads.
    #[default]
    Prometheus,
    /// OpenMetrics 1.0 (`application/openmetrics-text`), ending in `# EOF`.
    #[value(name = "openmetrics")]
    OpenMetrics,
}

impl Format {
    /// The HTTP `Content-Type` of this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A metric's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    Counter,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        }
    }
}

/// A series' labels, sorted by name, none with an empty value (see [`labels`]).
pub type Labels = Vec<(&'static str, String)>;

/// The labels of `pairs`, sorted by name, leaving out those with an empty value.
pub fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    let mut out: Labels = pairs
        .iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(name, value)| (*name, (*value).to_owned()))
        .collect();
    out.sort();
    out
}

/// One series' value.
#[derive(Clone, Debug, PartialEq)]
pub enum SeriesValue {
    Number(f64),
    Histogram(Buckets),
}

/// A metric family: its type, help, unit and series.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    kind: Kind,
    help: &'static str,
    unit: Option<&'static str>,
    series: BTreeMap<Labels, SeriesValue>,
}

impl Family {
    /// Sets the series of `labels` to `value`.
    pub fn set(&mut self, labels: Labels, value: f64) -> &mut Family {
        self.series.insert(labels, SeriesValue::Number(value));
        self
    }

    /// Sets the histogram of `labels`.
    pub fn observed(&mut self, labels: Labels, buckets: Buckets) -> &mut Family {
        self.series.insert(labels, SeriesValue::Histogram(buckets));
        self
    }
}

/// Families by name (a counter's without `_total`; a family with a unit ends in it).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exposition {
    families: BTreeMap<&'static str, Family>,
}

/// Every series of a number a long-lived endpoint has served, by family.
#[derive(Debug, Default)]
pub struct Seen(BTreeMap<&'static str, BTreeSet<Labels>>);

impl Exposition {
    /// The family `name` (made with `kind`, `help` and `unit` the first time).
    pub fn family(
        &mut self,
        name: &'static str,
        kind: Kind,
        help: &'static str,
        unit: Option<&'static str>,
    ) -> &mut Family {
        self.families.entry(name).or_insert_with(|| Family {
            kind,
            help,
            unit,
            series: BTreeMap::new(),
        })
    }

    /// The gauge `name`.
    pub fn gauge(&mut self, name: &'static str, help: &'static str) -> &mut Family {
        self.family(name, Kind::Gauge, help, None)
    }

    /// The counter `name` (its samples are `name_total`).
    pub fn counter(&mut self, name: &'static str, help: &'static str) -> &mut Family {
        self.family(name, Kind::Counter, help, None)
    }

    /// Adds a series reading 0 for every series of `seen` this one lacks, and records this
    /// one's series in `seen`.
    pub fn keep(&mut self, seen: &mut Seen) {
        for (name, family) in &mut self.families {
            let before = seen.0.entry(name).or_default();
            for labels in before.iter() {
                if !family.series.contains_key(labels)
                    && matches!(family.kind, Kind::Gauge | Kind::Counter)
                {
                    family
                        .series
                        .insert(labels.clone(), SeriesValue::Number(0.0));
                }
            }
            for (labels, value) in &family.series {
                if matches!(value, SeriesValue::Number(_)) {
                    before.insert(labels.clone());
                }
            }
        }
    }

    /// The exposition as text in `format`.
    pub fn encode(&self, format: Format) -> String {
        let mut families: Vec<(String, &'static str, &Family)> = self
            .families
            .iter()
            .filter(|(_, family)| !family.series.is_empty())
            .map(|(name, family)| (exposed_name(name, family.kind, format), *name, family))
            .collect();
        families.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = String::new();
        for (exposed, name, family) in families {
            let help = escape_help(family.help, format);
            match format {
                Format::Prometheus => {
                    let _ = writeln!(out, "# HELP {exposed} {help}");
                    let _ = writeln!(out, "# TYPE {exposed} {}", family.kind.as_str());
                }
                Format::OpenMetrics => {
                    let _ = writeln!(out, "# TYPE {exposed} {}", family.kind.as_str());
                    if let Some(unit) = family.unit {
                        let _ = writeln!(out, "# UNIT {exposed} {unit}");
                    }
                    let _ = writeln!(out, "# HELP {exposed} {help}");
                }
            }
            let sample = match family.kind {
                Kind::Counter => format!("{name}_total"),
                Kind::Gauge | Kind::Histogram => name.to_owned(),
            };
            for (labels, value) in &family.series {
                write_series(&mut out, &sample, labels, value);
            }
        }
        if format == Format::OpenMetrics {
            out.push_str("# EOF\n");
        }
        out
    }
}

/// The name a family goes by in `format`: the Prometheus text format types a counter by its
/// samples' name, `_total` included.
fn exposed_name(name: &str, kind: Kind, format: Format) -> String {
    match (kind, format) {
        (Kind::Counter, Format::Prometheus) => format!("{name}_total"),
        _ => name.to_owned(),
    }
}

fn write_series(out: &mut String, name: &str, labels: &Labels, value: &SeriesValue) {
    match value {
        SeriesValue::Number(n) => {
            let _ = writeln!(out, "{name}{} {}", label_text(labels, None), number(*n));
        }
        SeriesValue::Histogram(buckets) => {
            for (bound, count) in buckets.cumulative() {
                let le = label_text(labels, Some(&number(bound)));
                let _ = writeln!(out, "{name}_bucket{le} {count}");
            }
            let plain = label_text(labels, None);
            let _ = writeln!(out, "{name}_sum{plain} {}", number(buckets.sum()));
            let _ = writeln!(out, "{name}_count{plain} {}", buckets.count());
        }
    }
}

/// `{a="x",b="y"}` (and `le` last), or nothing without labels.
fn label_text(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(name, value)| format!("{name}=\"{}\"", escape_label(value)))
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// A number as both formats write it: `+Inf`, `-Inf`, `NaN`, else the shortest decimal that
/// reads back as the same value (`3`, `0.25`).
fn number(n: f64) -> String {
    if n.is_nan() {
        "NaN".to_owned()
    } else if n.is_infinite() {
        if n > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{n}")
    }
}

fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Help text: both formats escape `\` and line feeds; OpenMetrics `"` too.
fn escape_help(help: &str, format: Format) -> String {
    match format {
        Format::Prometheus => help.replace('\\', "\\\\").replace('\n', "\\n"),
        Format::OpenMetrics => escape_label(help),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Exposition {
        let mut e = Exposition::default();
        e.gauge("hermes_empty", "A family with no series is left out");
        e.gauge("hermes_b", "A gauge")
            .set(labels(&[("pool", "z"), ("machine", "")]), 2.0)
            .set(labels(&[("pool", "a\"\\\n")]), 0.5);
        e.counter("hermes_a", "A counter, \"quoted\"\\")
            .set(Vec::new(), 3.0);
        let mut buckets = Buckets::new([0.5, 1.0].into_iter());
        buckets.observe(0.25);
        buckets.observe(2.0);
        e.family(
            "hermes_c_seconds",
            Kind::Histogram,
            "A histogram",
            Some("seconds"),
        )
        .observed(Vec::new(), buckets);
        e
    }

    #[test]
    fn the_prometheus_text_format_types_a_counter_by_its_samples_name() {
        insta::assert_snapshot!(sample().encode(Format::Prometheus), @r#"
        # HELP hermes_a_total A counter, "quoted"\\
        # TYPE hermes_a_total counter
        hermes_a_total 3
        # HELP hermes_b A gauge
        # TYPE hermes_b gauge
        hermes_b{pool="a\"\\\n"} 0.5
        hermes_b{pool="z"} 2
        # HELP hermes_c_seconds A histogram
        # TYPE hermes_c_seconds histogram
        hermes_c_seconds_bucket{le="0.5"} 1
        hermes_c_seconds_bucket{le="1"} 1
        hermes_c_seconds_bucket{le="+Inf"} 2
        hermes_c_seconds_sum 2.25
        hermes_c_seconds_count 2
        "#);
    }

    #[test]
    fn openmetrics_types_a_counter_by_its_family_and_ends_in_eof() {
        insta::assert_snapshot!(sample().encode(Format::OpenMetrics), @r#"
        # TYPE hermes_a counter
        # HELP hermes_a A counter, \"quoted\"\\
        hermes_a_total 3
        # TYPE hermes_b gauge
        # HELP hermes_b A gauge
        hermes_b{pool="a\"\\\n"} 0.5
        hermes_b{pool="z"} 2
        # TYPE hermes_c_seconds histogram
        # UNIT hermes_c_seconds seconds
        # HELP hermes_c_seconds A histogram
        hermes_c_seconds_bucket{le="0.5"} 1
        hermes_c_seconds_bucket{le="1"} 1
        hermes_c_seconds_bucket{le="+Inf"} 2
        hermes_c_seconds_sum 2.25
        hermes_c_seconds_count 2
        # EOF
        "#);
    }

    #[test]
    fn families_and_series_come_out_sorted_whatever_order_they_were_made_in() {
        let mut forward = Exposition::default();
        let mut backward = Exposition::default();
        let names = ["hermes_x", "hermes_y", "hermes_z"];
        let pools: Vec<String> = (0..20).map(|i| format!("pool{i:02}")).collect();
        for name in names {
            for pool in &pools {
                forward.gauge(name, "h").set(labels(&[("pool", pool)]), 1.0);
            }
        }
        for name in names.iter().rev() {
            for pool in pools.iter().rev() {
                backward
                    .gauge(name, "h")
                    .set(labels(&[("pool", pool)]), 1.0);
            }
        }
        for format in [Format::Prometheus, Format::OpenMetrics] {
            let text = forward.encode(format);
            assert_eq!(text, backward.encode(format));
            let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
            let mut sorted = samples.clone();
            sorted.sort_unstable();
            assert_eq!(samples, sorted);
        }
    }

    #[test]
    fn a_series_once_served_reads_0_when_it_is_gone() {
        let mut seen = Seen::default();
        let mut first = Exposition::default();
        first
            .gauge("hermes_g", "h")
            .set(labels(&[("pool", "gone")]), 4.0);
        first.keep(&mut seen);
        let mut second = Exposition::default();
        second
            .gauge("hermes_g", "h")
            .set(labels(&[("pool", "new")]), 1.0);
        second.keep(&mut seen);
        let text = second.encode(Format::Prometheus);
        assert!(text.contains("hermes_g{pool=\"gone\"} 0\n"), "{text}");
        assert!(text.contains("hermes_g{pool=\"new\"} 1\n"), "{text}");
    }
}
