//! A server under test: where it listens, how to log in, which process it is.

use std::time::Duration;

/// A server to measure.
#[derive(Debug, Clone)]
pub struct Target {
    /// A short label for reports (`lyre`, `harper`).
    pub name: String,
    /// The Operations API base URL.
    pub url: String,
    /// The REST interface base URL.
    pub rest: String,
    /// Login name.
    pub user: String,
    /// Password.
    pub password: String,
    /// A header sent instead of Basic credentials (`authorization: Bearer …`,
    /// `cookie: …-hdb-session=…`), as `name: value`.
    pub auth_header: Option<String>,
    /// The server's process id, for CPU time and memory figures.
    pub pid: Option<u32>,
    /// Its MQTT broker's host and port.
    pub mqtt: Option<(String, u16)>,
}

/// Resource use of the server process, read from `/proc`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ProcessSample {
    /// User plus system CPU time consumed so far, in seconds.
    pub cpu_seconds: f64,
    /// Peak resident set size so far, in KiB (`VmHWM`).
    pub peak_rss_kib: u64,
    /// Current resident set size, in KiB (`VmRSS`).
    pub rss_kib: u64,
    /// Of which anonymous memory (the heap, stacks), in KiB (`RssAnon`).
    pub rss_anon_kib: u64,
    /// Of which mapped files (a database's map), in KiB (`RssFile`).
    pub rss_file_kib: u64,
    /// The CPU of each thread alive now (threads that ended are in the total only).
    #[serde(skip)]
    pub threads: Vec<ThreadTime>,
}

/// One thread's CPU so far.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadTime {
    /// Its id (unique while it lives).
    pub tid: u32,
    /// Its name, as `/proc` gives it (cut at 15 bytes).
    pub name: String,
    /// User plus system CPU seconds.
    pub seconds: f64,
}

/// CPU by what a server's threads do, told apart by Lyre's thread names: the
/// request threads (`lyre-worker`), the databases' writers (`writer-<database>`),
/// the JavaScript workers (`lyre-js-<n>`), and everything else (another server's
/// threads all count there).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct ThreadCpu {
    /// Request threads (and the blocking threads they start, which share the name).
    pub request: f64,
    /// Database writers.
    pub writer: f64,
    /// JavaScript workers.
    pub javascript: f64,
    /// The rest.
    pub other: f64,
}

impl ThreadCpu {
    /// Adds `seconds` of the thread named `comm` (its `/proc` name, cut at 15 bytes).
    fn add(&mut self, comm: &str, seconds: f64) {
        let slot = if comm == "lyre-worker" {
            &mut self.request
        } else if comm.starts_with("writer-") {
            &mut self.writer
        } else if comm.starts_with("lyre-js-") {
            &mut self.javascript
        } else {
            &mut self.other
        };
        *slot += seconds;
    }

    /// What each kind of thread spent between two samples of one process,
    /// scaled by `scale` (per request): each thread's CPU in `after` less its CPU in
    /// `before` (all of it for a thread started between), by its name. `total` is
    /// the process's own difference; what no thread alive at `after` accounts for
    /// (threads that ended between) is `other` too.
    pub fn between(before: &[ThreadTime], after: &[ThreadTime], total: f64, scale: f64) -> ThreadCpu {
        let mut spent = ThreadCpu::default();
        for thread in after {
            let earlier =
                before.iter().find(|t| t.tid == thread.tid && t.name == thread.name).map_or(0.0, |t| t.seconds);
            spent.add(&thread.name, (thread.seconds - earlier).max(0.0));
        }
        let named = spent.request + spent.writer + spent.javascript;
        let unnamed = spent.other + (total - named - spent.other).max(0.0);
        ThreadCpu {
            request: spent.request * scale,
            writer: spent.writer * scale,
            javascript: spent.javascript * scale,
            other: unnamed * scale,
        }
    }

    /// The threads of `threads` summed by what they do (the tests' view of a sample).
    #[cfg(test)]
    fn of(threads: &[ThreadTime]) -> ThreadCpu {
        let mut cpu = ThreadCpu::default();
        for thread in threads {
            cpu.add(&thread.name, thread.seconds);
        }
        cpu
    }
}

/// The CPU of each thread of process `pid` so far.
fn threads_of(pid: u32) -> Vec<ThreadTime> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|task| {
            let tid = task.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let (name, seconds) = stat_cpu(&stat)?;
            Some(ThreadTime { tid, name: name.to_string(), seconds })
        })
        .collect()
}

/// A `/proc/…/stat` line's command name and user plus system CPU seconds.
fn stat_cpu(stat: &str) -> Option<(&str, f64)> {
    let (head, after) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1;
    // Fields after the parenthesised command name; utime and stime are 14 and 15.
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some((comm, ticks / clock_ticks_per_second()))
}

impl Target {
    /// Samples the server process (all its threads), if its pid is known.
    pub fn sample(&self) -> Option<ProcessSample> {
        ProcessSample::of(self.pid?)
    }

    /// Sums samples over the process and its children (Harper runs under `npm`).
    pub fn sample_tree(&self) -> Option<ProcessSample> {
        let mut total = self.sample()?;
        for child in children(self.pid?) {
            let t = Target { pid: Some(child), ..self.clone() };
            if let Some(s) = t.sample_tree() {
                total.cpu_seconds += s.cpu_seconds;
                total.peak_rss_kib += s.peak_rss_kib;
                total.rss_kib += s.rss_kib;
                total.rss_anon_kib += s.rss_anon_kib;
                total.rss_file_kib += s.rss_file_kib;
            }
        }
        Some(total)
    }
}

impl ProcessSample {
    /// Samples process `pid` (all its threads) from `/proc`.
    pub fn of(pid: u32) -> Option<ProcessSample> {
        // The threads first: what they spent is then within the process's total,
        // read after.
        let threads = threads_of(pid);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, cpu_seconds) = stat_cpu(&stat)?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        Some(ProcessSample {
            cpu_seconds,
            peak_rss_kib: kib("VmHWM:"),
            rss_kib: kib("VmRSS:"),
            rss_anon_kib: kib("RssAnon:"),
            rss_file_kib: kib("RssFile:"),
            threads,
        })
    }

    /// Samples this process: the load generator itself.
    pub fn of_self() -> Option<ProcessSample> {
        ProcessSample::of(std::process::id())
    }
}

fn children(pid: u32) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) else {
        return Vec::new();
    };
    text.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// `sysconf(_SC_CLK_TCK)`: 100 on every Linux this runs on.
fn clock_ticks_per_second() -> f64 {
    100.0
}

/// How long to wait for a server to answer `/health`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests {
    use super::{ProcessSample, ThreadCpu, ThreadTime, stat_cpu};

    fn thread(tid: u32, name: &str, seconds: f64) -> ThreadTime {
        ThreadTime { tid, name: name.to_string(), seconds }
    }

    #[test]
    fn threads_are_told_apart_by_their_names() {
        let stat = "42 (writer-data) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0";
        assert_eq!(stat_cpu(stat), Some(("writer-data", 2.0)));
        // A name may hold parentheses and spaces; the last `)` ends it.
        assert_eq!(stat_cpu("7 (a (b) c) R 1 2 3 4 5 6 7 8 9 10 1 2 0"), Some(("a (b) c", 0.03)));
        let before = [
            thread(1, "lyre-worker", 1.0),
            thread(2, "writer-data", 2.0),
            thread(3, "lyre-js-0", 3.0),
            thread(4, "tokio-rt", 4.0),
            thread(5, "lyre-worker", 5.0),
        ];
        assert_eq!(ThreadCpu::of(&before), ThreadCpu { request: 6.0, writer: 2.0, javascript: 3.0, other: 4.0 });
        // Thread 5 ended (its CPU since is in the process's total only) and thread 6
        // started: the request threads spent 1 + 0.5, the rest of the 4 s is other.
        let after = [
            thread(1, "lyre-worker", 2.0),
            thread(2, "writer-data", 2.0),
            thread(3, "lyre-js-0", 3.0),
            thread(4, "tokio-rt", 4.0),
            thread(6, "lyre-worker", 0.5),
        ];
        let per = ThreadCpu::between(&before, &after, 4.0, 10.0);
        assert_eq!(per, ThreadCpu { request: 15.0, writer: 0.0, javascript: 0.0, other: 25.0 });
    }

    #[test]
    fn a_process_sample_splits_its_cpu_by_thread() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let spinning = stop.clone();
        let busy = std::thread::Builder::new()
            .name("lyre-worker".into())
            .spawn(move || {
                while !spinning.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
            .unwrap();
        // However loaded the machine, the spinning thread's CPU shows as a request
        // thread's once it has had some.
        let mut sample = ProcessSample::of_self().unwrap();
        let waited = std::time::Instant::now();
        while ThreadCpu::of(&sample.threads).request < 0.05 && waited.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            sample = ProcessSample::of_self().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
        let threads = ThreadCpu::of(&sample.threads);
        assert!(threads.request >= 0.05, "{sample:?}");
        // Read before the process's total, the threads' CPU is within it.
        let total = threads.request + threads.writer + threads.javascript + threads.other;
        assert!(total <= sample.cpu_seconds, "{sample:?}");
    }
}
