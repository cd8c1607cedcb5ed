//! Upstream capacity as plain rules: the running slots one model has on each upstream account (key) of its
//! region, and the order in which waiting jobs get them: start-time fair queuing across client accounts,
//! first come first served within one.

use std::collections::{HashMap, VecDeque};

/// One model's running slots on each key of its region.
#[derive(Debug, Clone, Default)]
pub struct Pool {
    caps: Vec<u32>,
    used: Vec<u32>,
}

impl Pool {
    /// A pool with `caps[k]` slots on key `k`.
    pub fn new(caps: Vec<u32>) -> Pool {
        let used = vec![0; caps.len()];
        Pool { caps, used }
    }

    /// Takes a slot on the key with the most free ones, skipping `tried` (keys that just refused this job);
    /// the lowest index wins a tie.
    pub fn take(&mut self, tried: &[usize]) -> Option<usize> {
        let key = (0..self.caps.len())
            .filter(|k| !tried.contains(k) && self.used[*k] < self.caps[*k])
            .max_by_key(|k| (self.caps[*k] - self.used[*k], std::cmp::Reverse(*k)))?;
        self.used[key] += 1;
        Some(key)
    }

    /// Takes a slot for a job that keys `tried` refused or failed: on another key if one has a slot free, else
    /// on any (a refusal for capacity passes; the job is not kept waiting for a key it has not tried).
    pub fn take_after(&mut self, tried: &[usize]) -> Option<usize> {
        self.take(tried).or_else(|| self.take(&[]))
    }

    /// Counts a slot as taken whatever the cap (a task that was running before the process started).
    pub fn hold(&mut self, key: usize) {
        if let Some(used) = self.used.get_mut(key) {
            *used += 1;
        }
    }

    pub fn give_back(&mut self, key: usize) {
        if let Some(used) = self.used.get_mut(key) {
            *used = used.saturating_sub(1);
        }
    }

    /// Takes the counts another keeper of the slots reported (a shared store), key by key.
    pub fn set_used(&mut self, used: Vec<u32>) {
        for (mine, theirs) in self.used.iter_mut().zip(used) {
            *mine = theirs;
        }
    }

    pub fn has_free(&self) -> bool {
        self.used.iter().zip(&self.caps).any(|(used, cap)| used < cap)
    }

    /// `(used, cap)` per key.
    pub fn slots(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.used.iter().copied().zip(self.caps.iter().copied())
    }

    /// How many keys the pool spans.
    pub fn keys(&self) -> usize {
        self.caps.len()
    }

    pub fn total(&self) -> u32 {
        self.caps.iter().sum()
    }
}

/// Virtual time one job of a weight-1 account costs.
const TURN: u64 = 1 << 20;

/// A job's start tag in a line whose clock (the tag of the job served last) is `now`, for an account whose
/// next job starts at `next_tag` at the earliest (none if it has not waited lately) and whose share is
/// `weight`: the tag, and where the account's job after it starts.
pub fn start_tag(next_tag: Option<u64>, now: u64, weight: u32) -> (u64, u64) {
    let start = next_tag.unwrap_or(now).max(now);
    (start, start + TURN / u64::from(weight.max(1)))
}

/// The tag of a job that had its turn and waits again, at the head of its account's jobs: no later than the
/// line's clock, nor than the account's first waiting job (`first`).
pub fn tag_again(first: Option<u64>, now: u64) -> u64 {
    first.map_or(now, |tag| tag.min(now))
}

/// Jobs waiting for a slot, served by start-time fair queuing: each account's jobs get virtual start tags
/// `1/weight` apart, and the job with the earliest tag goes next, so an account that has just started
/// waiting is served within one turn whatever the backlog of another.
#[derive(Debug)]
pub struct FairQueue<T> {
    accounts: HashMap<String, Waiting<T>>,
    /// The start tag of the job served last.
    now: u64,
    len: usize,
    /// Arrival order, to break ties between equal tags.
    arrivals: u64,
}

#[derive(Debug)]
struct Waiting<T> {
    /// (start tag, arrival, job)
    jobs: VecDeque<(u64, u64, T)>,
    /// Where the account's next job starts, at the earliest.
    next_tag: u64,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue { accounts: HashMap::new(), now: 0, len: 0, arrivals: 0 }
    }
}

impl<T> FairQueue<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `job` of `account`, whose share is `weight` (at least 1).
    pub fn push(&mut self, account: &str, weight: u32, job: T) {
        let now = self.now;
        let waiting = self
            .accounts
            .entry(account.to_string())
            .or_insert_with(|| Waiting { jobs: VecDeque::new(), next_tag: now });
        let (start, next_tag) = start_tag(Some(waiting.next_tag), now, weight);
        waiting.next_tag = next_tag;
        waiting.jobs.push_back((start, self.arrivals, job));
        self.arrivals += 1;
        self.len += 1;
    }

    /// Queues `job` ahead of everything of its account (a job that was refused and waits again).
    pub fn push_front(&mut self, account: &str, job: T) {
        let now = self.now;
        let waiting = self
            .accounts
            .entry(account.to_string())
            .or_insert_with(|| Waiting { jobs: VecDeque::new(), next_tag: now + TURN });
        let start = tag_again(waiting.jobs.front().map(|(tag, _, _)| *tag), now);
        waiting.jobs.push_front((start, 0, job));
        self.len += 1;
    }

    /// The next job and its account.
    pub fn pop(&mut self) -> Option<(String, T)> {
        let account = self
            .accounts
            .iter()
            .filter_map(|(name, w)| w.jobs.front().map(|(tag, arrival, _)| ((*tag, *arrival), name)))
            .min()
            .map(|(_, name)| name.clone())?;
        let waiting = self.accounts.get_mut(&account)?;
        let (tag, _, job) = waiting.jobs.pop_front()?;
        self.now = self.now.max(tag);
        if waiting.jobs.is_empty() && waiting.next_tag <= self.now {
            self.accounts.remove(&account);
        }
        self.len -= 1;
        Some((account, job))
    }

    /// The next job, without taking it.
    pub fn peek(&self) -> Option<&T> {
        self.accounts
            .values()
            .filter_map(|w| w.jobs.front().map(|(tag, arrival, job)| ((*tag, *arrival), job)))
            .min_by_key(|(order, _)| *order)
            .map(|(_, job)| job)
    }

    /// Takes the job `this` picks, wherever it stands (the next one, usually); with its account.
    pub fn take(&mut self, mut this: impl FnMut(&T) -> bool) -> Option<(String, T)> {
        if self.peek().is_some_and(&mut this) {
            return self.pop();
        }
        let (account, waiting) = self.accounts.iter_mut().find(|(_, w)| w.jobs.iter().any(|(_, _, job)| this(job)))?;
        let at = waiting.jobs.iter().position(|(_, _, job)| this(job))?;
        let (_, _, job) = waiting.jobs.remove(at)?;
        self.len -= 1;
        Some((account.clone(), job))
    }

    /// Removes the jobs `gone` picks; returns how many.
    pub fn remove(&mut self, mut gone: impl FnMut(&T) -> bool) -> usize {
        let mut removed = 0;
        for waiting in self.accounts.values_mut() {
            let before = waiting.jobs.len();
            waiting.jobs.retain(|(_, _, job)| !gone(job));
            removed += before - waiting.jobs.len();
        }
        self.len -= removed;
        removed
    }

    /// How many jobs go before the one `this` picks, if it waits.
    pub fn ahead_of(&self, mut this: impl FnMut(&T) -> bool) -> Option<usize> {
        let mine = self.accounts.values().flat_map(|w| &w.jobs).find(|(_, _, job)| this(job))?;
        let order = (mine.0, mine.1);
        Some(self.accounts.values().flat_map(|w| &w.jobs).filter(|(tag, arrival, _)| (*tag, *arrival) < order).count())
    }

    /// Jobs waiting per account.
    pub fn depths(&self) -> impl Iterator<Item = (&str, usize)> {
        self.accounts.iter().filter(|(_, w)| !w.jobs.is_empty()).map(|(name, w)| (name.as_str(), w.jobs.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_goes_to_the_key_with_the_most_free_and_never_over_a_cap() {
        // (caps, used, keys tried, the key taken)
        type Case = (&'static [u32], &'static [u32], &'static [usize], Option<usize>);
        let cases: &[Case] = &[
            (&[2, 2, 2], &[0, 0, 0], &[], Some(0)),
            (&[2, 2, 2], &[1, 0, 1], &[], Some(1)),
            (&[2, 2, 2], &[2, 2, 2], &[], None),
            (&[2, 2, 2], &[0, 1, 2], &[0], Some(1)),
            (&[2, 5], &[0, 2], &[], Some(1)),
            (&[], &[], &[], None),
        ];
        for (caps, used, tried, expected) in cases {
            let mut pool = Pool::new(caps.to_vec());
            for (key, n) in used.iter().enumerate() {
                (0..*n).for_each(|_| pool.hold(key));
            }
            assert_eq!(pool.take(tried), *expected, "caps {caps:?} used {used:?} tried {tried:?}");
        }
    }

    #[test]
    fn a_job_refused_by_a_key_goes_to_another_first_and_to_it_when_none_other_is_free() {
        let mut pool = Pool::new(vec![1, 1]);
        assert_eq!(pool.take_after(&[0]), Some(1));
        assert_eq!(pool.take_after(&[0]), Some(0));
        assert_eq!(pool.take_after(&[0]), None);
    }

    #[test]
    fn slots_given_back_are_taken_again_and_the_count_never_goes_negative() {
        let mut pool = Pool::new(vec![1]);
        assert_eq!(pool.take(&[]), Some(0));
        assert_eq!(pool.take(&[]), None);
        pool.give_back(0);
        pool.give_back(0);
        assert_eq!(pool.take(&[]), Some(0));
        assert!(!pool.has_free());
    }

    #[test]
    fn start_tags_space_an_accounts_jobs_by_its_weight_from_the_lines_clock() {
        // (next tag, clock, weight, start, next)
        let cases: &[(Option<u64>, u64, u32, u64, u64)] = &[
            (None, 0, 1, 0, TURN),
            (None, 5 * TURN, 1, 5 * TURN, 6 * TURN),
            (Some(TURN), 5 * TURN, 1, 5 * TURN, 6 * TURN),
            (Some(9 * TURN), 5 * TURN, 1, 9 * TURN, 10 * TURN),
            (Some(0), 0, 4, 0, TURN / 4),
            (Some(0), 0, 0, 0, TURN),
        ];
        for (next, now, weight, start, after) in cases {
            assert_eq!(start_tag(*next, *now, *weight), (*start, *after), "{next:?} {now} {weight}");
        }
        assert_eq!(tag_again(None, 7), 7);
        assert_eq!(tag_again(Some(3), 7), 3);
        assert_eq!(tag_again(Some(9), 7), 7);
    }

    #[test]
    fn an_account_that_starts_waiting_is_served_within_one_turn_of_a_backlog() {
        let mut queue = FairQueue::default();
        for i in 0..10_000 {
            queue.push("big", 1, ("big", i));
        }
        queue.pop();
        queue.push("small", 1, ("small", 0));
        let next: Vec<_> = (0..2).filter_map(|_| queue.pop()).map(|(a, _)| a).collect();
        assert!(next.contains(&"small".to_string()), "{next:?}");
    }

    #[test]
    fn backlogged_accounts_share_by_weight_and_keep_their_own_order() {
        let mut queue = FairQueue::default();
        for i in 0..30 {
            queue.push("a", 1, i);
            queue.push("b", 2, i);
        }
        let served: Vec<(String, i32)> = (0..30).filter_map(|_| queue.pop()).collect();
        let of = |name: &str| served.iter().filter(|(a, _)| a == name).map(|(_, i)| *i).collect::<Vec<_>>();
        assert_eq!(of("b").len(), 20, "{served:?}");
        assert_eq!(of("a"), (0..10).collect::<Vec<_>>());
        assert_eq!(of("b"), (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn a_job_knows_how_many_go_before_it_and_leaves_when_removed() {
        let mut queue = FairQueue::default();
        for i in 0..3 {
            queue.push("a", 1, i);
        }
        queue.push("b", 1, 10);
        assert_eq!(queue.ahead_of(|j| *j == 10), Some(1));
        assert_eq!(queue.ahead_of(|j| *j == 2), Some(3));
        assert_eq!(queue.remove(|j| *j == 0), 1);
        assert_eq!(queue.ahead_of(|j| *j == 10), Some(0));
        assert_eq!(queue.len(), 3);
        queue.push_front("a", 7);
        assert_eq!(queue.peek(), Some(&7));
        assert_eq!(queue.take(|j| *j == 2), Some(("a".to_string(), 2)));
        assert_eq!(queue.pop().map(|(_, j)| j), Some(7));
        assert_eq!(queue.len(), 2);
    }
}
