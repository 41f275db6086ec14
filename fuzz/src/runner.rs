//! The stable driver's loop: replay the corpus, then run mutated inputs, each under
//! [`std::panic::catch_unwind`]; keep the first crashing input as an artifact.
//!
//! Deterministic: the corpus is read in file-name order and every random choice comes
//! from [`Rng`] seeded with the seed and the target's name, so `--seed S` names the same
//! inputs on every run, whether the target runs alone or under `all`.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::mutate::Mutator;
use crate::rng::{fnv1a, Rng};
use crate::Target;

/// How to run a target.
#[derive(Debug, Clone)]
pub struct Options {
    /// Mutated inputs to run after the corpus.
    pub runs: u64,
    /// Seed of the mutations.
    pub seed: u64,
    /// The corpus root: inputs of target `t` are the files of `corpus/t/`.
    pub corpus: PathBuf,
    /// Where crashing inputs go: `artifacts/t/crash-<hash>`.
    pub artifacts: PathBuf,
    /// Longest input the mutations make.
    pub max_len: usize,
}

/// Where a crashing input came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// A corpus file (or a file given to replay).
    File(PathBuf),
    /// The `n`th mutated input (0-based) of the run.
    Generated(u64),
}

/// A crashing input.
#[derive(Debug, Clone)]
pub struct Crash {
    /// The input.
    pub input: Vec<u8>,
    /// The panic message and location.
    pub message: String,
    /// Where the input came from.
    pub origin: Origin,
    /// Where it was saved, if it could be.
    pub artifact: Option<PathBuf>,
}

/// What running one target did.
#[derive(Debug)]
pub struct Outcome {
    /// Corpus files replayed.
    pub replayed: usize,
    /// Mutated inputs run.
    pub generated: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// The first crash, which ends the target's run.
    pub crash: Option<Crash>,
}

thread_local! {
    /// Where the last panic on this thread happened, as the panic hook saw it.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces the panic hook with one that prints nothing and remembers the location, so
/// that a crash is reported once, with its input, by [`Crash`]'s owner.
pub fn quiet_panics() {
    panic::set_hook(Box::new(|info| {
        let at = info
            .location()
            .map(|l| format!(" at {}:{}:{}", l.file(), l.line(), l.column()))
            .unwrap_or_default();
        LAST_PANIC.with(|last| *last.borrow_mut() = Some(at));
    }));
}

/// Runs `run` on `input`; returns the panic message if it panicked.
///
/// # Errors
/// The panic's message (and location, under [`quiet_panics`]).
pub fn catch(run: fn(&[u8]), input: &[u8]) -> Result<(), String> {
    LAST_PANIC.with(|last| last.borrow_mut().take());
    let payload = match panic::catch_unwind(AssertUnwindSafe(|| run(input))) {
        Ok(()) => return Ok(()),
        Err(payload) => payload,
    };
    let message = if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    };
    let at = LAST_PANIC
        .with(|last| last.borrow_mut().take())
        .unwrap_or_default();
    Err(format!("{message}{at}"))
}

/// The files of `dir`, sorted by name, with their contents; none if `dir` is missing.
///
/// # Errors
/// A file or the folder that exists but cannot be read.
pub fn load_dir(dir: &Path) -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry?.path();
        if path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).with_context(|| format!("reading {}", p.display()))?;
            Ok((p, bytes))
        })
        .collect()
}

/// Replays `files` through `target`, stopping at the first crash.
pub fn replay(target: &Target, files: &[(PathBuf, Vec<u8>)]) -> Option<Crash> {
    files.iter().find_map(|(path, input)| {
        catch(target.run, input).err().map(|message| Crash {
            input: input.clone(),
            message,
            origin: Origin::File(path.clone()),
            artifact: None,
        })
    })
}

/// Replays the target's corpus, then runs `options.runs` mutated inputs (of the corpus,
/// or of the target's seeds where its corpus is empty). Saves a crashing input.
///
/// # Errors
/// Only an unreadable corpus; a crash is in the [`Outcome`].
pub fn run(target: &Target, options: &Options) -> anyhow::Result<Outcome> {
    let start = Instant::now();
    let files = load_dir(&options.corpus.join(target.name))?;
    let mut outcome = Outcome {
        replayed: files.len(),
        generated: 0,
        elapsed: Duration::ZERO,
        crash: replay(target, &files),
    };
    if outcome.crash.is_none() {
        let mut entries: Vec<Vec<u8>> = files.into_iter().map(|(_, b)| b).collect();
        if entries.is_empty() {
            entries = (target.seeds)().into_iter().map(|(_, b)| b).collect();
        }
        let mutator = Mutator::new(&entries, target.fields, options.max_len);
        let mut rng = Rng::new(options.seed, target.name);
        for n in 0..options.runs {
            let input = mutator.next_input(&mut rng);
            outcome.generated += 1;
            if let Err(message) = catch(target.run, &input) {
                outcome.crash = Some(Crash {
                    input,
                    message,
                    origin: Origin::Generated(n),
                    artifact: None,
                });
                break;
            }
        }
    }
    if let Some(crash) = &mut outcome.crash {
        crash.artifact = save(&options.artifacts.join(target.name), &crash.input);
    }
    outcome.elapsed = start.elapsed();
    Ok(outcome)
}

/// Writes `input` to `dir/crash-<hash>`; `None` (after a message) if it cannot.
fn save(dir: &Path, input: &[u8]) -> Option<PathBuf> {
    let path = dir.join(format!("crash-{:016x}", fnv1a(input)));
    match std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, input)) {
        Ok(()) => Some(path),
        Err(e) => {
            eprintln!("rpc-fuzz: cannot save {}: {e}", path.display());
            None
        }
    }
}

/// `bytes` as lowercase hex, cut after `max` bytes (with a note of the full length).
pub fn hex(bytes: &[u8], max: usize) -> String {
    let mut out = String::with_capacity(2 * bytes.len().min(max) + 32);
    for b in &bytes[..bytes.len().min(max)] {
        write!(out, "{b:02x}").expect("writing to a String");
    }
    if bytes.len() > max {
        write!(out, "... ({} bytes in all)", bytes.len()).expect("writing to a String");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panics_on_x(data: &[u8]) {
        assert!(!data.contains(&b'x'), "found an x");
    }

    fn target() -> Target {
        Target {
            name: "t",
            run: panics_on_x,
            fields: |_| Vec::new(),
            seeds: || vec![("a".into(), b"abc".to_vec())],
        }
    }

    #[test]
    fn catch_reports_the_message() {
        assert_eq!(catch(panics_on_x, b"abc"), Ok(()));
        let e = catch(panics_on_x, b"axc").unwrap_err();
        assert!(e.starts_with("found an x"), "{e}");
    }

    #[test]
    fn a_crash_is_found_saved_and_reproducible() {
        let dir = std::env::temp_dir().join(format!("rpc-fuzz-test-{}", std::process::id()));
        let options = Options {
            runs: 100_000,
            seed: 1,
            corpus: dir.join("corpus"),
            artifacts: dir.join("artifacts"),
            max_len: 64,
        };
        let first = run(&target(), &options).unwrap();
        let crash = first.crash.expect("random bytes reach an x");
        assert!(matches!(crash.origin, Origin::Generated(_)));
        let saved = std::fs::read(crash.artifact.as_ref().unwrap()).unwrap();
        assert_eq!(saved, crash.input);
        let again = run(&target(), &options).unwrap().crash.unwrap();
        assert_eq!(again.input, crash.input, "same seed, same crash");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn hex_is_cut_after_max() {
        assert_eq!(hex(&[0, 0xab, 7], 8), "00ab07");
        assert_eq!(hex(&[1, 2, 3], 2), "0102... (3 bytes in all)");
    }
}
