//! Questions asked at the same time are answered together. The engine is built for batches: it
//! embeds a batch's questions in one call and scans each kb table once for all of them. So each
//! index has a queue and a few worker threads; a worker that comes free takes the oldest
//! question and every other queued one asked with the same settings (up to `max_batch`), and
//! answers them as one batch from the generation current at that moment. A lone question is
//! answered at once; under load the batches grow by themselves.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, RwLock};

use flexstruct_pipeline::core::Error;
use flexstruct_pipeline::query::{Answer, QueryConfig, Question, QuestionContext};
use tokio::sync::oneshot;

use crate::generation::Generation;

/// What a question wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// The context only.
    Context,
    /// The context and the answer.
    Answer,
}

/// What a question got.
#[derive(Debug)]
pub enum Output {
    /// Its context.
    Context(QuestionContext),
    /// Its answer.
    Answer(Box<Answer>),
}

/// A question's output with the generation that gave it.
#[derive(Debug)]
pub struct Reply {
    /// The generation the question was answered from.
    pub generation: Arc<Generation>,
    /// What it got.
    pub output: Output,
}

struct Ask {
    question: Question,
    config: QueryConfig,
    want: Want,
    reply: oneshot::Sender<Result<Reply, Arc<Error>>>,
}

#[derive(Default)]
struct Queue {
    asks: VecDeque<Ask>,
    closed: bool,
}

/// The question queue of one index and its workers.
pub struct Batcher {
    queue: Arc<(Mutex<Queue>, Condvar)>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl Batcher {
    /// Starts `workers` threads answering from whatever generation `current` holds when they
    /// take a batch, `max_batch` questions at most.
    pub fn start(current: Arc<RwLock<Arc<Generation>>>, workers: usize, max_batch: usize) -> Batcher {
        let queue: Arc<(Mutex<Queue>, Condvar)> = Arc::default();
        for n in 0..workers.max(1) {
            let queue = queue.clone();
            let current = current.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("flexstruct-ask-{n}"))
                .spawn(move || work(&queue, &current, max_batch.max(1)));
            if let Err(e) = spawned {
                crate::log(&format!("could not start a query worker: {e}"));
            }
        }
        Batcher { queue }
    }

    /// Queues a question; the reply comes when its batch is done.
    pub fn ask(
        &self,
        question: Question,
        config: QueryConfig,
        want: Want,
    ) -> oneshot::Receiver<Result<Reply, Arc<Error>>> {
        let (reply, receiver) = oneshot::channel();
        let (lock, ready) = &*self.queue;
        if let Ok(mut queue) = lock.lock()
            && !queue.closed
        {
            queue.asks.push_back(Ask { question, config, want, reply });
            ready.notify_one();
        }
        receiver
    }

    /// Questions waiting for a worker.
    pub fn waiting(&self) -> usize {
        self.queue.0.lock().map_or(0, |q| q.asks.len())
    }
}

impl Drop for Batcher {
    fn drop(&mut self) {
        let (lock, ready) = &*self.queue;
        if let Ok(mut queue) = lock.lock() {
            queue.closed = true;
        }
        ready.notify_all();
    }
}

/// A worker: takes batches until the queue is closed.
fn work(queue: &(Mutex<Queue>, Condvar), current: &RwLock<Arc<Generation>>, max_batch: usize) {
    loop {
        let batch = {
            let (lock, ready) = queue;
            let Ok(mut queue) = lock.lock() else { return };
            while queue.asks.is_empty() && !queue.closed {
                queue = match ready.wait(queue) {
                    Ok(queue) => queue,
                    Err(_) => return,
                };
            }
            if queue.closed {
                return;
            }
            take_batch(&mut queue.asks, max_batch)
        };
        let Ok(generation) = current.read().map(|g| g.clone()) else { return };
        answer(&generation, batch);
    }
}

/// The oldest question and the others queued with the same settings and want, in order.
fn take_batch(asks: &mut VecDeque<Ask>, max_batch: usize) -> Vec<Ask> {
    let Some(first) = asks.pop_front() else { return Vec::new() };
    let mut batch = vec![first];
    let mut i = 0;
    while i < asks.len() && batch.len() < max_batch {
        if asks[i].want == batch[0].want && asks[i].config == batch[0].config {
            batch.extend(asks.remove(i));
        } else {
            i += 1;
        }
    }
    batch
}

/// Answers one batch from `generation` and replies to each question. Retrieval runs here; an
/// LLM's answers are waited for on a thread of their own, so that the worker takes the next
/// batch meanwhile (the extractive reader's are computed here: they are work, not waiting).
fn answer(generation: &Arc<Generation>, batch: Vec<Ask>) {
    let Some(first) = batch.first() else { return };
    let (config, want) = (first.config.clone(), first.want);
    let questions: Vec<Question> = batch.iter().map(|a| a.question.clone()).collect();
    let engine = &generation.engine;
    let retrieved = engine
        .prepare_for(questions, config.mode)
        .and_then(|prepared| engine.contexts(&prepared, &config).map(|contexts| (prepared, contexts)));
    let (prepared, contexts) = match retrieved {
        Ok(retrieved) => retrieved,
        Err(error) => {
            let error = Arc::new(error);
            for ask in batch {
                let _ = ask.reply.send(Err(error.clone()));
            }
            return;
        }
    };
    let reply = move |generation: &Arc<Generation>, outputs: Vec<Output>| {
        for (ask, output) in batch.into_iter().zip(outputs) {
            let _ = ask.reply.send(Ok(Reply { generation: generation.clone(), output }));
        }
    };
    match want {
        Want::Context => {
            let outputs = contexts.into_iter().map(Output::Context).collect();
            reply(generation, outputs);
        }
        Want::Answer => {
            let generation = generation.clone();
            let respond = move || {
                let answers = generation.engine.answer_contexts(&prepared, &config, contexts);
                reply(&generation, answers.into_iter().map(|a| Output::Answer(Box::new(a))).collect());
            };
            if engine.answers_with_llm() {
                if let Err(e) = std::thread::Builder::new().name("flexstruct-answer".into()).spawn(respond) {
                    crate::log(&format!("could not start a thread for the LLM's answers: {e}"));
                }
            } else {
                respond();
            }
        }
    }
}
