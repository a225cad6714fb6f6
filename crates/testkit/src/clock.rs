//! [`FakeClock`]: a wall clock that can be stepped while the process reading it runs, by
//! libfaketime.
//!
//! libfaketime (Debian's `faketime` package) is preloaded into the process and answers its
//! wall-clock calls with the real time plus an offset it reads from a file. With
//! `FAKETIME_NO_CACHE=1` it reads the file on every call, so writing a new offset steps the
//! process's clock at once, forward or back, as an NTP step or an operator's `date -s`
//! would. Monotonic clocks are left alone (`FAKETIME_DONT_FAKE_MONOTONIC=1`): they are what a
//! stepped wall clock must not move, and what the torture suite measures everything with.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use crate::process::scratch_dir;

/// Where Debian puts libfaketime, under the multiarch folders of `/usr/lib`.
const LIBRARY: &str = "faketime/libfaketime.so.1";

/// The wall clock of the processes started with [`FakeClock::apply`]: the real time plus an
/// offset, which [`FakeClock::set_offset_ms`] changes while they run. Starts at offset 0. Every
/// process given the same clock shares its offset.
#[derive(Debug)]
pub struct FakeClock {
    library: PathBuf,
    file: PathBuf,
    offset_ms: AtomicI64,
    _dir: tempfile::TempDir,
}

impl FakeClock {
    /// A clock at offset 0. Panics, naming the package to install, if libfaketime is not
    /// installed.
    pub fn new() -> Self {
        let dir = scratch_dir("clock");
        let clock = Self {
            library: library(),
            file: dir.path().join("offset"),
            offset_ms: AtomicI64::new(0),
            _dir: dir,
        };
        clock.set_offset_ms(0);
        clock
    }

    /// Makes `command` run on this clock: libfaketime preloaded, reading the offset file on
    /// every call, monotonic clocks real.
    pub fn apply(&self, command: &mut Command) {
        command.envs(self.env());
    }

    /// The environment [`FakeClock::apply`] sets.
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        vec![
            ("LD_PRELOAD", self.library.clone().into_os_string()),
            ("FAKETIME_TIMESTAMP_FILE", self.file.clone().into_os_string()),
            ("FAKETIME_NO_CACHE", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
        ]
    }

    /// Steps the clock to the real time plus `offset_ms` (negative: behind), at once for
    /// every process on it.
    pub fn set_offset_ms(&self, offset_ms: i64) {
        let sign = if offset_ms < 0 { '-' } else { '+' };
        let magnitude = Duration::from_millis(offset_ms.unsigned_abs());
        // Seconds with a fraction, which libfaketime reads as an offset from the real time.
        let text = format!("{sign}{}.{:03}\n", magnitude.as_secs(), magnitude.subsec_millis());
        // Written aside and renamed over the file, so that a process reading it never sees
        // half an offset (which libfaketime would read as another one).
        let aside = self.file.with_extension("new");
        fs::write(&aside, text).unwrap_or_else(|e| panic!("write {}: {e}", aside.display()));
        fs::rename(&aside, &self.file).unwrap_or_else(|e| panic!("rename to {}: {e}", self.file.display()));
        self.offset_ms.store(offset_ms, Ordering::Release);
    }

    /// The offset now, in milliseconds.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Acquire)
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

/// The path of libfaketime; panics, naming the package, if it is not installed.
fn library() -> PathBuf {
    let found = fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join(LIBRARY))
        .chain([Path::new("/usr/lib").join(LIBRARY)])
        .find(|path| path.is_file());
    found.unwrap_or_else(|| {
        panic!(
            "libfaketime is not installed (looked for /usr/lib/*/{LIBRARY}): install Debian's \
             `faketime` package (`apt-get install -y faketime`)"
        )
    })
}
