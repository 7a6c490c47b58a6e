//! Threads started once and reused, one job at a time each: the benchmarks' stand-in for the
//! registry's blocking pool (tokio's, whose threads outlive the calls they run), so a unit's
//! children cost no thread start and their calls reach the group commit together, as the
//! product's do.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::Scope;

type Job<'scope, R> = Box<dyn FnOnce() -> R + Send + 'scope>;

/// `count` threads of a scope; [`Workers::run`] hands thread `index` a job, [`Workers::wait`]
/// collects answers.
pub struct Workers<'scope, R> {
    jobs: Vec<Sender<Job<'scope, R>>>,
    /// Each job's answer; `None` for a job that panicked.
    done: Receiver<Option<R>>,
}

impl<'scope, R: Send + 'scope> Workers<'scope, R> {
    /// Starts `count` threads (at least one) in `scope`; they end when the `Workers` is dropped.
    pub fn start<'env>(scope: &'scope Scope<'scope, 'env>, count: usize) -> Self {
        let (answer, done) = channel();
        let jobs = (0..count.max(1))
            .map(|_| {
                let (tx, rx) = channel::<Job<'scope, R>>();
                let answer = answer.clone();
                scope.spawn(move || {
                    for job in rx {
                        let answered = catch_unwind(AssertUnwindSafe(job)).ok();
                        if answer.send(answered).is_err() {
                            return;
                        }
                    }
                });
                tx
            })
            .collect();
        Workers { jobs, done }
    }

    /// Queues `job` on thread `index` (modulo the thread count).
    pub fn run(&self, index: usize, job: impl FnOnce() -> R + Send + 'scope) {
        // A thread that is gone answers nothing: `wait` says so.
        let _ = self.jobs[index % self.jobs.len()].send(Box::new(job));
    }

    /// The answers of the next `count` jobs to end, in the order they ended; `None` if one of
    /// them panicked.
    pub fn wait(&self, count: usize) -> Option<Vec<R>> {
        (0..count)
            .map(|_| self.done.recv().ok().flatten())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_answers_on_threads_started_once() {
        let mut threads = Vec::new();
        std::thread::scope(|scope| {
            let workers = Workers::start(scope, 3);
            for round in 0..4u32 {
                for i in 0..3u32 {
                    workers.run(i as usize, move || (round, i, std::thread::current().id()));
                }
                let mut answers = workers.wait(3).expect("every job answers");
                answers.sort_by_key(|(_, i, _)| *i);
                let done: Vec<_> = answers.iter().map(|(r, i, _)| (*r, *i)).collect();
                assert_eq!(done, vec![(round, 0), (round, 1), (round, 2)]);
                threads.extend(answers.into_iter().map(|(_, _, id)| format!("{id:?}")));
            }
        });
        // Twelve jobs ran on the three threads started, not on twelve.
        threads.sort();
        threads.dedup();
        assert_eq!(threads.len(), 3);
    }

    #[test]
    fn a_job_that_panics_is_a_missing_answer_and_the_thread_goes_on() {
        std::thread::scope(|scope| {
            let workers = Workers::start(scope, 1);
            workers.run(0, || -> u32 { panic!("a job that panics") });
            assert_eq!(workers.wait(1), None);
            workers.run(0, || 7);
            assert_eq!(workers.wait(1), Some(vec![7]));
        });
    }
}
