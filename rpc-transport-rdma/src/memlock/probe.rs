//! What the kernel will let this process pin: `RLIMIT_MEMLOCK`, what is pinned already,
//! and whether `CAP_IPC_LOCK` lifts the limit, read from `/proc/self` (the parsers are
//! pure functions of the files' text, unit-tested below).
//!
//! Registering memory (`ibv_reg_mr`) pins its pages and adds them to the process's
//! pinned-page count (`VmPin` in `/proc/self/status`); the kernel refuses, with `ENOMEM`,
//! a registration that takes the count over the soft `RLIMIT_MEMLOCK` unless the process
//! has `CAP_IPC_LOCK` in the initial user namespace (rdma-core's `ib_umem_get`; Soft-RoCE
//! and Soft-iWARP pin the same way). `mlock` is counted apart (`VmLck`) and does not
//! reduce what registration may pin.

/// `CAP_IPC_LOCK`'s bit in the capability sets (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// What the kernel lets this process pin, as read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    /// The soft `RLIMIT_MEMLOCK` in bytes; `None`: unlimited.
    pub(crate) limit: Option<u64>,
    /// Bytes already pinned (`VmPin`): other registrations of this process.
    pub(crate) pinned: u64,
    /// Whether `CAP_IPC_LOCK` is effective where the kernel checks it (the initial user
    /// namespace): the limit does not apply then.
    pub(crate) ipc_lock: bool,
}

impl Probe {
    /// Reads `/proc/self/limits`, `/proc/self/status` and `/proc/self/uid_map`.
    ///
    /// # Errors
    /// A file that cannot be read or parsed (no procfs): the caller cannot know the
    /// limit then.
    pub(crate) fn read() -> Result<Probe, String> {
        let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"));
        let limit = parse_limit(&read("/proc/self/limits")?)?;
        let (pinned, capabilities) = parse_status(&read("/proc/self/status")?)?;
        // Outside the initial user namespace (a rootless container) a capability there
        // does not lift the limit: the kernel asks the initial namespace.
        let initial_namespace = std::fs::read_to_string("/proc/self/uid_map")
            .map(|map| is_initial_namespace(&map))
            .unwrap_or(true);
        Ok(Probe {
            limit,
            pinned,
            ipc_lock: initial_namespace && capabilities & (1 << CAP_IPC_LOCK) != 0,
        })
    }

    /// Bytes this process may still pin; `None`: no limit applies.
    pub(crate) fn room(&self) -> Option<u64> {
        match self.limit {
            _ if self.ipc_lock => None,
            None => None,
            Some(limit) => Some(limit.saturating_sub(self.pinned)),
        }
    }
}

/// The soft limit of the `Max locked memory` line of `/proc/PID/limits` (bytes), `None`
/// for `unlimited`.
fn parse_limit(limits: &str) -> Result<Option<u64>, String> {
    let line = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max locked memory"))
        .ok_or("no \"Max locked memory\" line in /proc/self/limits")?;
    match line.split_whitespace().next() {
        Some("unlimited") => Ok(None),
        Some(soft) => soft
            .parse()
            .map(Some)
            .map_err(|_| format!("bad locked-memory limit {soft:?} in /proc/self/limits")),
        None => Err("an empty \"Max locked memory\" line in /proc/self/limits".into()),
    }
}

/// `VmPin` in bytes and the effective capability set (`CapEff`) of `/proc/PID/status`.
/// A kernel without `VmPin` (before 3.2) has nothing to count: 0.
fn parse_status(status: &str) -> Result<(u64, u64), String> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    let pinned = match field("VmPin:") {
        Some(value) => {
            let kib = value.strip_suffix("kB").map(str::trim).unwrap_or(value);
            kib.parse::<u64>()
                .map_err(|_| format!("bad VmPin {value:?} in /proc/self/status"))?
                * 1024
        }
        None => 0,
    };
    let capabilities = field("CapEff:").ok_or("no CapEff in /proc/self/status")?;
    let capabilities = u64::from_str_radix(capabilities, 16)
        .map_err(|_| format!("bad CapEff {capabilities:?} in /proc/self/status"))?;
    Ok((pinned, capabilities))
}

/// Whether `/proc/PID/uid_map` maps the whole id range onto itself: the initial user
/// namespace.
fn is_initial_namespace(uid_map: &str) -> bool {
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    fields == ["0", "0", "4294967295"]
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str =
        "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max open files            1048576              1048576              files     \n\
        Max locked memory         65536                8388608              bytes     \n\
        Max address space         unlimited            unlimited            bytes     \n";

    fn status(pin_kib: u64, cap_eff: &str) -> String {
        format!("Name:\tcat\nVmLck:\t      64 kB\nVmPin:\t {pin_kib:>7} kB\nCapPrm:\t0\nCapEff:\t{cap_eff}\n")
    }

    #[test]
    fn the_soft_limit_is_read_and_unlimited_is_none() {
        assert_eq!(parse_limit(LIMITS), Ok(Some(65536)));
        let unlimited = LIMITS.replace("65536     ", "unlimited ");
        assert_eq!(parse_limit(&unlimited), Ok(None));
        assert!(parse_limit("Max open files 1 1 files\n").is_err());
        assert!(parse_limit("Max locked memory  lots  lots bytes\n").is_err());
    }

    #[test]
    fn pinned_bytes_and_the_capability_come_from_status() {
        assert_eq!(
            parse_status(&status(128, "0000000000000000")),
            Ok((128 * 1024, 0))
        );
        let (_, caps) = parse_status(&status(0, "000001ffffffffff")).unwrap();
        assert_ne!(caps & (1 << CAP_IPC_LOCK), 0);
        let (_, caps) = parse_status(&status(0, "00000000a80425fb")).unwrap();
        assert_eq!(
            caps & (1 << CAP_IPC_LOCK),
            0,
            "Docker's default set has no IPC_LOCK"
        );
        assert_eq!(
            parse_status("CapEff:\t0\n"),
            Ok((0, 0)),
            "no VmPin: nothing pinned"
        );
        assert!(parse_status("VmPin:\t 1 kB\n").is_err(), "no CapEff");
        assert!(parse_status("VmPin:\t x kB\nCapEff:\t0\n").is_err());
    }

    #[test]
    fn room_is_the_limit_less_what_is_pinned_unless_unlimited_or_capable() {
        let probe = |limit, pinned, ipc_lock| Probe {
            limit,
            pinned,
            ipc_lock,
        };
        assert_eq!(probe(Some(64 << 10), 0, false).room(), Some(64 << 10));
        assert_eq!(probe(Some(8 << 20), 3 << 20, false).room(), Some(5 << 20));
        assert_eq!(probe(Some(4096), 8192, false).room(), Some(0));
        assert_eq!(probe(None, 8192, false).room(), None);
        assert_eq!(probe(Some(64 << 10), 0, true).room(), None);
    }

    #[test]
    fn only_the_identity_map_is_the_initial_namespace() {
        assert!(is_initial_namespace("         0          0 4294967295\n"));
        assert!(!is_initial_namespace("         0       1000          1\n"));
        assert!(!is_initial_namespace("0 100000 65536\n65536 1000 1\n"));
    }

    #[test]
    fn this_process_can_be_probed() {
        let probe = Probe::read().expect("procfs");
        if let Some(room) = probe.room() {
            assert!(room <= probe.limit.expect("a limit"));
        }
    }
}
