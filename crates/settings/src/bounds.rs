//! Units and bounds: how a number is read and which numbers keep the system live.

use std::time::Duration;

use crate::SettingsError;

/// What a key's (or flag's) number counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A whole number of things (children, bytes, attempts).
    Count,
    /// Milliseconds, whole.
    Millis,
    /// Seconds, decimals allowed.
    Seconds,
    /// Hours, decimals allowed.
    Hours,
    /// Days, decimals allowed.
    Days,
}

impl Unit {
    /// Seconds in one of this unit (`None` for counts).
    fn seconds(self) -> Option<f64> {
        match self {
            Unit::Count => None,
            Unit::Millis => Some(0.001),
            Unit::Seconds => Some(1.0),
            Unit::Hours => Some(3_600.0),
            Unit::Days => Some(86_400.0),
        }
    }

    fn whole(self) -> bool {
        matches!(self, Unit::Count | Unit::Millis)
    }

    fn name(self) -> &'static str {
        match self {
            Unit::Count => "",
            Unit::Millis => " ms",
            Unit::Seconds => " seconds",
            Unit::Hours => " hours",
            Unit::Days => " days",
        }
    }
}

/// The accepted values of a key or flag, in its own unit: `min..=max`, and 0 too (meaning
/// "off") when `zero_is_off`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds {
    /// How the number is read.
    pub unit: Unit,
    /// The smallest accepted value.
    pub min: f64,
    /// The largest accepted value.
    pub max: f64,
    /// 0 is accepted as well, and means "off".
    pub zero_is_off: bool,
}

/// Thirty days in seconds: the longest wait, lease or limit any flag or key accepts.
pub(crate) const MONTH_SECONDS: f64 = 30.0 * 86_400.0;

impl Bounds {
    /// A count or duration from `min` to `max`.
    pub const fn new(unit: Unit, min: f64, max: f64) -> Bounds {
        Bounds {
            unit,
            min,
            max,
            zero_is_off: false,
        }
    }

    /// The same bounds, with 0 accepted as "off".
    pub const fn or_off(self) -> Bounds {
        Bounds {
            zero_is_off: true,
            ..self
        }
    }

    /// `--lease SECS`: the lease of a claim, as `delivery.claim_lease_seconds`.
    pub const LEASE: Bounds = Bounds::new(Unit::Seconds, 0.1, 86_400.0);
    /// `--wait SECS`: how long a consumer waits for something deliverable.
    pub const WAIT: Bounds = Bounds::new(Unit::Seconds, 0.0, MONTH_SECONDS);
    /// `--timeout SECS`: a child's wall-clock limit, 0 = off.
    pub const TIMEOUT: Bounds = Bounds::new(Unit::Seconds, 0.1, MONTH_SECONDS).or_off();
    /// `worker --capacity N`: units a worker runs at once, as `max_concurrent_children`.
    pub const CAPACITY: Bounds = Bounds::new(Unit::Count, 1.0, 1024.0);
    /// `worker --drain-timeout SECS`: how long a stopping worker lets its children finish
    /// (0: interrupt them at once).
    pub const DRAIN_TIMEOUT: Bounds = Bounds::new(Unit::Seconds, 0.0, MONTH_SECONDS);

    /// Whether `value` is accepted.
    pub fn admits(&self, value: f64) -> bool {
        value.is_finite()
            && (!self.unit.whole() || value.fract() == 0.0)
            && ((self.zero_is_off && value == 0.0) || (self.min..=self.max).contains(&value))
    }

    /// What an accepted value must be, in words: "a whole number from 1 to 1024".
    pub fn expected(&self) -> String {
        let kind = if self.unit.whole() {
            "a whole number"
        } else {
            "a number"
        };
        let off = if self.zero_is_off {
            " (or 0 for off)"
        } else {
            ""
        };
        format!(
            "{kind} from {} to {}{}{off}",
            self.min,
            self.max,
            self.unit.name()
        )
    }

    /// Parses `raw` (trimmed) and checks it; `what` names the key or flag in the error.
    pub fn parse(&self, what: &str, raw: &str) -> Result<f64, SettingsError> {
        raw.trim()
            .parse::<f64>()
            .ok()
            .filter(|v| self.admits(*v))
            .ok_or_else(|| SettingsError::BadValue {
                what: what.to_owned(),
                expected: self.expected(),
            })
    }

    /// Parses `raw` as a duration in this unit: `None` for 0 when 0 means off.
    pub fn parse_duration(&self, what: &str, raw: &str) -> Result<Option<Duration>, SettingsError> {
        let value = self.parse(what, raw)?;
        Ok(self.duration(value))
    }

    /// An accepted value as a duration (`None` for 0 when 0 means off, or for counts).
    pub fn duration(&self, value: f64) -> Option<Duration> {
        let per = self.unit.seconds()?;
        if self.zero_is_off && value == 0.0 {
            return None;
        }
        Some(Duration::from_secs_f64(value * per))
    }
}
