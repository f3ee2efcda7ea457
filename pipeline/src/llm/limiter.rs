//! Requests-per-minute and tokens-per-minute limits, as token buckets that refill continuously.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A bucket of `capacity` units refilled at `capacity` per minute.
#[derive(Debug)]
struct Bucket {
    capacity: f64,
    available: f64,
    updated: Instant,
}

impl Bucket {
    fn new(per_minute: u32) -> Option<Bucket> {
        (per_minute > 0).then(|| Bucket {
            capacity: f64::from(per_minute),
            available: f64::from(per_minute),
            updated: Instant::now(),
        })
    }

    /// Takes `amount` (capped at the capacity) and returns how long to wait before using it.
    fn take(&mut self, amount: f64, now: Instant) -> Duration {
        let rate = self.capacity / 60.0;
        self.available = (self.available + now.duration_since(self.updated).as_secs_f64() * rate).min(self.capacity);
        self.updated = now;
        self.available -= amount.min(self.capacity);
        if self.available >= 0.0 { Duration::ZERO } else { Duration::from_secs_f64(-self.available / rate) }
    }
}

/// Both limits of one endpoint.
#[derive(Debug)]
pub struct RateLimiter {
    requests: Mutex<Option<Bucket>>,
    tokens: Mutex<Option<Bucket>>,
}

impl RateLimiter {
    /// Limits of `requests_per_minute` and `tokens_per_minute` (0: unlimited).
    pub fn new(requests_per_minute: u32, tokens_per_minute: u32) -> Self {
        RateLimiter {
            requests: Mutex::new(Bucket::new(requests_per_minute)),
            tokens: Mutex::new(Bucket::new(tokens_per_minute)),
        }
    }

    /// How long a request of about `tokens` tokens must wait; the units are reserved.
    pub fn reserve(&self, tokens: u64) -> Duration {
        let now = Instant::now();
        let wait_requests = self.requests.lock().ok().and_then(|mut b| b.as_mut().map(|b| b.take(1.0, now)));
        let wait_tokens = self.tokens.lock().ok().and_then(|mut b| b.as_mut().map(|b| b.take(tokens as f64, now)));
        wait_requests.unwrap_or_default().max(wait_tokens.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_once_the_bucket_is_empty() {
        let limiter = RateLimiter::new(60, 0);
        for _ in 0..60 {
            assert_eq!(limiter.reserve(1), Duration::ZERO);
        }
        let wait = limiter.reserve(1);
        assert!(wait > Duration::from_millis(900) && wait <= Duration::from_millis(1000), "{wait:?}");
        let tokens = RateLimiter::new(0, 600);
        assert_eq!(tokens.reserve(600), Duration::ZERO);
        let wait = tokens.reserve(300);
        assert!(wait > Duration::from_secs(29) && wait <= Duration::from_secs(30), "{wait:?}");
        assert_eq!(RateLimiter::new(0, 0).reserve(1_000_000), Duration::ZERO);
    }
}
