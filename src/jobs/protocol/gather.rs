//! The collector of one `jobs.parallelFor` or `jobs.map`: chunk outcomes in, one settlement out.
//!
//! Each chunk is an ordinary pool item whose reply is `ReplyTo::Chunk`: the worker that ran it
//! deposits the outcome here, on its own thread, instead of posting it to the promise's home.
//! The last chunk to resolve (or the first to fail) takes the home's reply out of the collector
//! and sends one message, so the home sees a `parallelFor` exactly as it sees a dispatch: one
//! settle, with the results already in chunk order. Whoever takes the reply settles; everyone
//! after finds it gone and drops their outcome, which is how a failure, a cancel and late
//! chunk replies stay exactly-once without any state on the home.
//!
//! A `parallelFor` answers one result per chunk and names a failing chunk; a `map` answers one
//! result per element, its chunks' lists joined in order, and its chunks name the failing
//! element themselves (only the worker knows which element was running).

use std::sync::{Arc, Mutex};

use super::job::JobShared;
use super::pool_shared::PoolShared;
use super::principal_shared::PrincipalShared;
use super::reply::{reply, ReplyTo};
use crate::value::Message;
use crate::vm::{Cancel, JobFailure, Outcome};

/// What the collector guards: the results so far and the reply not yet sent.
struct Collected {
    results: Vec<Option<Message>>,
    remaining: usize,
    /// The home's reply; `None` once the promise has been settled (or cancelled).
    reply: Option<ReplyTo>,
}

/// What the chunks of a call answer, and so how their outcomes are put together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gathered {
    /// A `parallelFor`: one value per chunk; a failure is named by its chunk here.
    Chunks,
    /// A `map`: a list per chunk, joined; a failure arrives named by its element.
    Elements,
}

/// One `parallelFor`'s (or `map`'s) chunks and where their gathered outcome goes.
pub(crate) struct Gather {
    collected: Mutex<Collected>,
    kind: Gathered,
    /// Every chunk's job, in chunk order, so a failure or a cancel can stop the rest.
    chunks: Vec<Arc<JobShared>>,
    principal: Arc<PrincipalShared>,
    pool: Arc<PoolShared>,
}

impl Gather {
    pub(crate) fn new(
        kind: Gathered,
        chunks: Vec<Arc<JobShared>>,
        reply: ReplyTo,
        principal: Arc<PrincipalShared>,
        pool: Arc<PoolShared>,
    ) -> Arc<Gather> {
        let n = chunks.len();
        Arc::new(Gather {
            collected: Mutex::new(Collected {
                results: (0..n).map(|_| None).collect(),
                remaining: n,
                reply: Some(reply),
            }),
            kind,
            chunks,
            principal,
            pool,
        })
    }

    /// Takes chunk `index`'s outcome (chunks count from 0 here, from 1 in messages).
    pub(crate) fn deposit(&self, index: usize, outcome: Outcome) {
        let n = self.chunks.len();
        let mut collected = self.collected.lock().unwrap_or_else(|e| e.into_inner());
        if collected.reply.is_none() {
            return; // settled already: a failure, a cancel, or this is a late cancelled chunk
        }
        let settle = match outcome {
            Outcome::Resolved(value) => {
                collected.results[index] = Some(value);
                collected.remaining -= 1;
                if collected.remaining > 0 {
                    return;
                }
                let results = std::mem::take(&mut collected.results);
                Outcome::Resolved(Message::List(self.join(results)))
            }
            Outcome::Rejected(failure) if self.kind == Gathered::Chunks => {
                Outcome::Rejected(Arc::new(JobFailure {
                    message: format!("chunk {} of {n}: {}", index + 1, failure.message),
                    ..(*failure).clone()
                }))
            }
            rejected @ Outcome::Rejected(_) => rejected,
            Outcome::Cancelled => Outcome::Cancelled,
        };
        let to = collected.reply.take();
        drop(collected);
        if !matches!(settle, Outcome::Resolved(_)) {
            self.cancel_chunks();
        }
        if let Some(to) = to {
            reply(&self.principal, to, settle, &self.pool);
        }
    }

    /// The call's list: the chunks' results in chunk order, or (a map) the elements of their
    /// lists in chunk order.
    fn join(&self, results: Vec<Option<Message>>) -> Vec<Message> {
        let results = results.into_iter().map(|r| r.unwrap_or(Message::Nil));
        match self.kind {
            Gathered::Chunks => results.collect(),
            Gathered::Elements => {
                let chunks: Vec<Message> = results.collect();
                let len = chunks.iter().map(|c| match c {
                    Message::List(elements) => elements.len(),
                    _ => 1,
                });
                let mut joined = Vec::with_capacity(len.sum());
                for chunk in chunks {
                    match chunk {
                        Message::List(elements) => joined.extend(elements),
                        other => joined.push(other),
                    }
                }
                joined
            }
        }
    }

    /// Stops every chunk: queued ones never run, running ones are interrupted. A chunk that has
    /// finished is left alone by its own hand-off.
    fn cancel_chunks(&self) {
        for job in &self.chunks {
            job.request_cancel();
        }
    }
}

/// `p:cancel()` on the `parallelFor` promise: the home has settled it as cancelled, so the reply
/// is dropped unsent and every chunk is stopped.
impl Cancel for Gather {
    fn cancel(self: Arc<Self>) {
        let taken = self
            .collected
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reply
            .take();
        if taken.is_some() {
            self.cancel_chunks();
        }
    }
}
