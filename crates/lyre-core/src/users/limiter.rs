//! A bound on failed logins: at most `attempts` failures per user name and per
//! client address within a sliding `window`; beyond it every login for that name or
//! from that address is refused (429) until the oldest failure leaves the window,
//! whether the password is right or not, so guessing cannot go faster than the
//! limit. Memory stays bounded: the table keeps at most [`MAX_TRACKED`] keys, and
//! forgets the stalest first.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How many names and addresses are tracked at most.
pub const MAX_TRACKED: usize = 100_000;

/// The limit's settings (`authentication.maxLoginAttempts`,
/// `authentication.loginAttemptWindow`).
#[derive(Debug, Clone, Copy)]
pub struct LoginLimit {
    /// Failures allowed within the window (0: no limit).
    pub attempts: u32,
    /// The window.
    pub window: Duration,
}

impl Default for LoginLimit {
    fn default() -> Self {
        Self { attempts: 10, window: Duration::from_secs(60) }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    User(String),
    Address(IpAddr),
}

/// Failed logins lately, per name and per address.
pub(crate) struct Limiter {
    limit: LoginLimit,
    failures: Mutex<HashMap<Key, VecDeque<Instant>>>,
}

impl Limiter {
    pub(crate) fn new(limit: LoginLimit) -> Self {
        Self { limit, failures: Mutex::new(HashMap::new()) }
    }

    fn keys(username: &str, from: Option<IpAddr>) -> impl Iterator<Item = Key> {
        std::iter::once(Key::User(username.to_string())).chain(from.map(Key::Address))
    }

    /// `Err(seconds to wait)` when `username` or `from` is over the limit now.
    pub(crate) fn check(&self, username: &str, from: Option<IpAddr>) -> Result<(), u64> {
        if self.limit.attempts == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut failures = self.failures.lock();
        let mut wait = Duration::ZERO;
        for key in Self::keys(username, from) {
            if let Some(times) = failures.get_mut(&key) {
                while times.front().is_some_and(|t| now.duration_since(*t) >= self.limit.window) {
                    times.pop_front();
                }
                if times.len() >= self.limit.attempts as usize
                    && let Some(oldest) = times.front()
                {
                    wait = wait.max(self.limit.window.saturating_sub(now.duration_since(*oldest)));
                }
            }
        }
        if wait.is_zero() { Ok(()) } else { Err(wait.as_secs().max(1)) }
    }

    /// Records a failed login.
    pub(crate) fn failed(&self, username: &str, from: Option<IpAddr>) {
        if self.limit.attempts == 0 {
            return;
        }
        let now = Instant::now();
        let mut failures = self.failures.lock();
        if failures.len() >= MAX_TRACKED {
            let window = self.limit.window;
            failures.retain(|_, times| times.back().is_some_and(|t| now.duration_since(*t) < window));
            if failures.len() >= MAX_TRACKED {
                failures.clear();
            }
        }
        for key in Self::keys(username, from) {
            let times = failures.entry(key).or_default();
            times.push_back(now);
            while times.len() > self.limit.attempts as usize {
                times.pop_front();
            }
        }
    }

    /// Forgets a name's failures after it logged in.
    pub(crate) fn succeeded(&self, username: &str) {
        self.failures.lock().remove(&Key::User(username.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_beyond_the_limit_refuse_the_name_and_the_address() {
        let limiter = Limiter::new(LoginLimit { attempts: 3, window: Duration::from_secs(60) });
        let here: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..3 {
            assert!(limiter.check("ann", Some(here)).is_ok());
            limiter.failed("ann", Some(here));
        }
        assert!(limiter.check("ann", None).is_err(), "the name is limited");
        assert!(limiter.check("bob", Some(here)).is_err(), "so is the address, for any name");
        assert!(limiter.check("bob", Some("10.0.0.2".parse().unwrap())).is_ok());
        limiter.succeeded("ann");
        assert!(limiter.check("ann", None).is_ok());
    }

    #[test]
    fn failures_leave_the_window() {
        let limiter = Limiter::new(LoginLimit { attempts: 1, window: Duration::from_millis(30) });
        limiter.failed("ann", None);
        assert!(limiter.check("ann", None).is_err());
        std::thread::sleep(Duration::from_millis(40));
        assert!(limiter.check("ann", None).is_ok());
    }
}
