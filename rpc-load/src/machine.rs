//! What the report says about where it ran: the machine (from `/proc`) and the CPU time
//! this process used. Linux only; elsewhere the fields read as unknown.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`): 100 on every Linux
/// architecture this runs on (the kernel exports times in this unit whatever its HZ).
const USER_HZ: f64 = 100.0;

/// The machine the load generator ran on.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// Logical CPUs this process may run on.
    pub cores: usize,
    /// Logical CPUs of the machine (`processor` lines of `/proc/cpuinfo`).
    pub machine_cores: usize,
    /// The CPU's model name from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// The kernel release.
    pub kernel: String,
    /// The host name.
    pub hostname: String,
}

impl Machine {
    /// Reads the machine's description.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let machine_cores = cpuinfo
            .lines()
            .filter(|l| l.starts_with("processor"))
            .count()
            .max(cores);
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (key, value) = l.split_once(':')?;
                (key.trim() == "model name").then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            cores,
            machine_cores,
            cpu_model,
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            hostname: read_trimmed("/proc/sys/kernel/hostname"),
        }
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "unknown".to_owned(), |s| s.trim().to_owned())
}

/// CPU time a process has used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuTime {
    /// User-mode CPU seconds.
    pub user_seconds: f64,
    /// Kernel-mode CPU seconds.
    pub system_seconds: f64,
}

impl CpuTime {
    /// The CPU time of this process so far (all threads); zero where `/proc` is missing.
    pub fn of_self() -> CpuTime {
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| CpuTime::parse_stat(&s))
            .unwrap_or_default()
    }

    /// Parses a `/proc/<pid>/stat` line: fields 14 (utime) and 15 (stime), in ticks.
    ///
    /// ```
    /// let line = "42 (a (b) c) S 1 42 42 0 -1 0 0 0 0 0 250 30 0 0 20 0 1 0";
    /// let cpu = rdmarpc_load::machine::CpuTime::parse_stat(line).unwrap();
    /// assert_eq!((cpu.user_seconds, cpu.system_seconds), (2.5, 0.3));
    /// ```
    pub fn parse_stat(line: &str) -> Option<CpuTime> {
        // The command name may hold spaces and parentheses: fields resume after the last ')'.
        let rest = &line[line.rfind(')')? + 1..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // `rest` starts at field 3 (state), so field n is at index n - 3.
        let ticks = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(CpuTime {
            user_seconds: ticks(14)? as f64 / USER_HZ,
            system_seconds: ticks(15)? as f64 / USER_HZ,
        })
    }

    /// User plus system seconds.
    pub fn total_seconds(&self) -> f64 {
        self.user_seconds + self.system_seconds
    }
}

/// `time` as RFC 3339 in UTC, e.g. `2024-05-01T12:34:56Z` (as ghz's `date`).
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let t = UNIX_EPOCH + Duration::from_secs(1_714_566_896);
/// assert_eq!(rdmarpc_load::machine::rfc3339(t), "2024-05-01T12:34:56Z");
/// ```
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `time` as RFC 3339 in UTC with nanoseconds, trailing zeros trimmed, as Go's
/// `RFC3339Nano` (how ghz writes a detail's `timestamp`), e.g.
/// `2024-05-01T12:34:56.5Z`.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// let t = UNIX_EPOCH + Duration::new(1_714_566_896, 500_000_000);
/// assert_eq!(rdmarpc_load::machine::rfc3339_nanos(t), "2024-05-01T12:34:56.5Z");
/// let whole = UNIX_EPOCH + Duration::from_secs(1_714_566_896);
/// assert_eq!(rdmarpc_load::machine::rfc3339_nanos(whole), "2024-05-01T12:34:56Z");
/// ```
pub fn rfc3339_nanos(time: SystemTime) -> String {
    let nanos = time
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .subsec_nanos();
    let seconds = rfc3339(time);
    if nanos == 0 {
        return seconds;
    }
    let fraction = format!("{nanos:09}");
    format!(
        "{}.{}Z",
        seconds.trim_end_matches('Z'),
        fraction.trim_end_matches('0')
    )
}

/// Year, month, day of a count of days since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
