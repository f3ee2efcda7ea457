//! One index as the service holds it: its current kb generation, the queue of questions asked
//! of it, and its writer — one thread per index that applies its update jobs one batch at a
//! time with the stage code of the binaries ([`compose::apply`], [`compose::update`]), loads the
//! next generation beside the current one and swaps it in.

use std::path::Path;
use std::sync::{Arc, RwLock};

use anyhow::Context as _;
use flexstruct_pipeline::compose::{self, Change};
use flexstruct_pipeline::config::Config;
use flexstruct_pipeline::core::chain_message;
use flexstruct_pipeline::io::{Index, IndexLocation, LocalIndex, Selection, StageMetrics};
use flexstruct_pipeline::stages::ingest;
use flexstruct_schemas::Table;

use crate::batch::Batcher;
use crate::generation::Generation;
use crate::jobs::{DocStatus, Job, JobDocument, JobKind, JobState, Jobs};

/// The name of the file the documents of job `id`'s JSON body are staged in (and so the source
/// the documents table records for them, `<job>.jsonl:<line>`).
pub fn body_file(id: &str) -> String {
    format!("{id}.jsonl")
}

/// Ended jobs kept per index (their records, in memory and in the index); older ones are forgotten.
pub const KEPT_JOBS: usize = 1000;

/// How the question queues are worked.
#[derive(Debug, Clone, Copy)]
pub struct Workers {
    /// Threads answering questions per index.
    pub threads: usize,
    /// Most questions answered as one batch.
    pub max_batch: usize,
}

/// A served index.
#[derive(Debug)]
pub struct Served {
    /// Its name in requests.
    pub name: String,
    /// Where it lives.
    pub location: IndexLocation,
    /// The folder the service reads (the index, or a working copy of a remote one).
    pub index: Index,
    config: Config,
    current: Arc<RwLock<Arc<Generation>>>,
    /// Its update jobs.
    pub jobs: Arc<Jobs>,
    batcher: Batcher,
    /// The working copy of a remote index (removed when the service stops).
    _copy: Option<LocalIndex>,
    /// The writer's thread (a folder's index).
    writer: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Served {
    /// Opens `location` as `name`: loads its kb and documents, and, for a folder, resumes the
    /// update jobs a stopped server left unfinished (before the load, when the kb on disk
    /// cannot be loaded without them: a merge killed half-way) and starts its writer.
    pub fn open(
        name: &str,
        location: &IndexLocation,
        config: &Config,
        workers: Workers,
    ) -> anyhow::Result<Arc<Served>> {
        let (index, copy) = match location {
            IndexLocation::Local(path) => (open_index(path)?, None),
            IndexLocation::Remote(_) => {
                let read: Vec<Table> = Table::ALL.into_iter().filter(|t| t.is_kb() || *t == Table::Documents).collect();
                let local = location.open_local(Selection::Tables(&read), false)?;
                (Index::open(local.path())?, Some(local))
            }
        };
        let jobs = Arc::new(Jobs::open(index.root())?);
        let writer = copy.is_none().then(|| Writer {
            name: name.to_owned(),
            index: index.clone(),
            config: config.clone(),
            jobs: jobs.clone(),
            paths: Arc::default(),
        });
        let first = match (Generation::load(&index, config, 1), &writer) {
            (Ok(generation), _) => Arc::new(generation),
            (Err(error), Some(writer)) if jobs.has_queued() => {
                crate::log(&format!(
                    "index {name}: the kb cannot be loaded ({}); finishing the update jobs left unfinished first",
                    chain_message(&error)
                ));
                match writer.apply(&jobs.take_now(), None) {
                    Some(generation) => {
                        writer.paths.request(name, &index, config);
                        generation
                    }
                    None => Arc::new(Generation::load(&index, config, 1).with_context(|| format!("index {name}"))?),
                }
            }
            (Err(error), _) => return Err(anyhow::Error::new(error).context(format!("index {name}"))),
        };
        let current = Arc::new(RwLock::new(first));
        let batcher = Batcher::start(current.clone(), workers.threads, workers.max_batch);
        let writer = match writer {
            Some(writer) => {
                let current = current.clone();
                let thread = std::thread::Builder::new()
                    .name(format!("flexstruct-writer-{name}"))
                    .spawn(move || writer.run(&current))
                    .context("starting the index's writer")?;
                Some(thread)
            }
            None => None,
        };
        Ok(Arc::new(Served {
            name: name.to_owned(),
            location: location.clone(),
            index,
            config: config.clone(),
            current,
            jobs,
            batcher,
            _copy: copy,
            writer: std::sync::Mutex::new(writer),
        }))
    }

    /// The generation answering now.
    pub fn generation(&self) -> Arc<Generation> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The configuration the index is served with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The question queue.
    pub fn batcher(&self) -> &Batcher {
        &self.batcher
    }

    /// Whether documents can be added and deleted (a folder; a remote index is served
    /// read-only: its stages run where its storage is written).
    pub fn writable(&self) -> bool {
        self._copy.is_none()
    }

    /// Writes the LLM calls the current generation's backends made since the last time.
    pub fn record_calls(&self) {
        if self.writable()
            && let Err(e) = self.generation().engine.record_calls()
        {
            crate::log(&format!("index {}: recording the LLM calls: {}", self.name, chain_message(&e)));
        }
    }

    /// Stops the writer after the batch it is applying, and waits for it (a job cut short would
    /// be finished by the next start anyway).
    pub fn stop(&self) {
        self.jobs.close();
        let thread = self.writer.lock().ok().and_then(|mut w| w.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

fn open_index(path: &Path) -> anyhow::Result<Index> {
    Index::open(path).with_context(|| format!("{}: not an index (build it with make index first)", path.display()))
}

/// The writer of one index.
struct Writer {
    name: String,
    index: Index,
    config: Config,
    jobs: Arc<Jobs>,
    paths: Arc<PathsRefresh>,
}

/// Rebuilds of the path index of `--mode paths` after updates, in a thread of their own, one at
/// a time: it is built from the whole kb (half a minute on ultradomain-mix, mostly embedding
/// every node's label), so the writer does not wait for it, and a rebuild asked for while one runs
/// follows it once. Until a rebuild is done, `paths` answers 409 naming the stale path index
/// (its parts carry the kb they were built from); every other strategy answers from the new kb.
#[derive(Debug, Default)]
struct PathsRefresh {
    /// (a rebuild runs, another is wanted after it)
    state: std::sync::Mutex<(bool, bool)>,
}

impl PathsRefresh {
    fn request(self: &Arc<Self>, name: &str, index: &Index, config: &Config) {
        {
            let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if state.0 {
                state.1 = true;
                return;
            }
            state.0 = true;
        }
        let (me, name, index, config) = (self.clone(), name.to_owned(), index.clone(), config.clone());
        let spawned = std::thread::Builder::new().name(format!("flexstruct-paths-{name}")).spawn(move || {
            loop {
                let started = std::time::Instant::now();
                match compose::refresh_paths(&index, &config) {
                    Ok(Some(_)) => crate::log(&format!(
                        "index {name}: path index rebuilt for the new kb in {:.1} s",
                        started.elapsed().as_secs_f64()
                    )),
                    Ok(None) => {}
                    Err(e) => crate::log(&format!("index {name}: rebuilding the path index: {}", chain_message(&e))),
                }
                let mut state = me.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if state.1 {
                    state.1 = false;
                } else {
                    state.0 = false;
                    return;
                }
            }
        });
        if let Err(e) = spawned {
            crate::log(&format!("could not start the path index's rebuild: {e}"));
            self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0 = false;
        }
    }
}

impl Writer {
    /// Applies the queued jobs, a batch at a time, until the jobs are closed; after each batch
    /// applied, asks for the path index's rebuild ([`PathsRefresh`]).
    fn run(&self, current: &RwLock<Arc<Generation>>) {
        while let Some(batch) = self.jobs.take() {
            if self.apply(&batch, Some(current)).is_some() {
                self.paths.request(&self.name, &self.index, &self.config);
            }
            self.jobs.forget_old(KEPT_JOBS);
        }
    }

    /// Applies jobs `ids` (their changes in order, then the stages once), loads the kb they made
    /// as the next generation and swaps it into `current` (when there is one: at start there is
    /// none yet) before the jobs say they are done, so that a client that sees a job done gets
    /// its documents. `None` when the update or the load failed: the jobs say why, and the
    /// current generation stays.
    fn apply(&self, ids: &[String], current: Option<&RwLock<Arc<Generation>>>) -> Option<Arc<Generation>> {
        let number = current.map_or(0, |c| c.read().unwrap_or_else(std::sync::PoisonError::into_inner).number);
        let started = std::time::Instant::now();
        for id in ids {
            self.jobs.update(id, |job| {
                job.state = JobState::Running;
                job.started_at = Some(crate::now());
                job.stage = Some("ingest".to_owned());
            });
        }
        let outcome = self.changes(ids).and_then(|()| {
            let mut on_stage = |stage: flexstruct_pipeline::stages::Stage| {
                for id in ids {
                    self.jobs.update(id, |job| {
                        job.stage = Some(stage.name().to_owned());
                        for d in job.documents.iter_mut().filter(|d| d.status == DocStatus::Processing) {
                            d.stage = Some(stage.name().to_owned());
                        }
                    });
                }
            };
            Ok(compose::update(&self.index, &self.config, &mut on_stage)?)
        });
        let runs = match outcome {
            Ok(runs) => runs,
            Err(error) => {
                self.fail(ids, number, &format!("the update stopped: {error:#}"));
                return None;
            }
        };
        self.record_failures(ids, &runs);
        let next = match Generation::load(&self.index, &self.config, number + 1) {
            Ok(next) => Arc::new(next),
            Err(error) => {
                self.fail(ids, number, &format!("the updated kb could not be loaded: {}", chain_message(&error)));
                return None;
            }
        };
        if let Some(current) = current {
            let previous = std::mem::replace(
                &mut *current.write().unwrap_or_else(std::sync::PoisonError::into_inner),
                next.clone(),
            );
            if let Err(e) = previous.engine.record_calls() {
                crate::log(&format!("index {}: recording the LLM calls: {}", self.name, chain_message(&e)));
            }
        }
        for id in ids {
            self.jobs.update(id, |job| {
                job.state = JobState::Done;
                job.stage = None;
                job.finished_at = Some(crate::now());
                job.generation = Some(next.number);
                job.kb = Some("new".to_owned());
                for d in job.documents.iter_mut().filter(|d| d.status == DocStatus::Processing) {
                    d.status = DocStatus::Processed;
                    d.stage = None;
                }
                // `done` says the job was applied, not that each document was: say how many were not.
                let failed = job.documents.iter().filter(|d| d.status == DocStatus::Failed).count();
                if failed > 0 {
                    job.notes.push(format!(
                        "{failed} of the {} documents failed (each one's message is in `documents`); the others \
                         are served",
                        job.documents.len()
                    ));
                }
            });
            self.jobs.remove_files(id);
        }
        crate::log(&format!(
            "index {}: {} job(s) applied in {:.2} s; serving kb generation {}",
            self.name,
            ids.len(),
            started.elapsed().as_secs_f64(),
            next.number
        ));
        Some(next)
    }

    /// Applies each job's change to the documents table.
    fn changes(&self, ids: &[String]) -> anyhow::Result<()> {
        for id in ids {
            let Some(job) = self.jobs.get(id) else { continue };
            match job.kind {
                JobKind::Add => self.add(&job)?,
                JobKind::Delete => {
                    let ids: Vec<String> = job.documents.iter().filter_map(|d| d.doc_id.clone()).collect();
                    compose::apply(&self.index, &self.config, &Change::Remove(ids))?;
                    self.jobs.update(&job.id, |job| {
                        for d in &mut job.documents {
                            d.status = DocStatus::Processing;
                        }
                    });
                }
            }
        }
        Ok(())
    }

    /// Ingests the files job `job` brought from the index's upload folder (the same folder for
    /// every upload, so that a file uploaded again under its name replaces the document its
    /// earlier version gave, as ingest does for a corpus folder).
    fn add(&self, job: &Job) -> anyhow::Result<()> {
        let uploads = self.index.root().join(".serve").join("uploads");
        let staged = self.jobs.files(&job.id);
        reset_dir(&uploads)?;
        for entry in std::fs::read_dir(&staged).with_context(|| format!("{}: cannot be listed", staged.display()))? {
            let from = entry.with_context(|| format!("{}: cannot be listed", staged.display()))?.path();
            let to = uploads.join(from.file_name().unwrap_or_default());
            std::fs::copy(&from, &to).with_context(|| format!("{}: cannot be copied", from.display()))?;
        }
        let (docs, failures) = ingest::documents_of(&uploads, &self.config.ingest)?;
        let file = body_file(&job.id);
        let rename = |text: &str| if job.body { body_places(text, &file) } else { text.to_owned() };
        let mut documents: Vec<JobDocument> = docs
            .iter()
            .map(|d| JobDocument {
                source: rename(&d.source),
                doc_id: Some(d.doc_id.clone()),
                title: d.title.clone(),
                status: DocStatus::Processing,
                stage: Some("ingest".to_owned()),
                message: None,
            })
            .collect();
        documents.extend(failures.iter().map(|f| {
            let source = rename(&f.unit);
            let message = rename(&f.message);
            JobDocument {
                source,
                doc_id: f.doc_id.clone(),
                title: None,
                status: DocStatus::Failed,
                stage: Some("ingest".to_owned()),
                message: Some(message),
            }
        }));
        documents.sort_by(|a, b| natural(&a.source).cmp(&natural(&b.source)));
        self.jobs.update(&job.id, |j| j.documents = documents);
        compose::apply(&self.index, &self.config, &Change::Add(uploads.clone()))?;
        reset_dir(&uploads)?;
        Ok(())
    }

    /// Marks the documents of `ids` that a stage failed on.
    fn record_failures(&self, ids: &[String], runs: &[StageMetrics<serde_json::Value>]) {
        // The first failure of each document (its earliest stage), then one write per job.
        let mut failed: std::collections::HashMap<&str, (&str, &str)> = std::collections::HashMap::new();
        for run in runs {
            for failure in &run.failures {
                if let Some(doc_id) = failure.doc_id.as_deref() {
                    failed.entry(doc_id).or_insert((&run.stage, &failure.message));
                }
            }
        }
        if failed.is_empty() {
            return;
        }
        for id in ids {
            self.jobs.update(id, |job| {
                for d in job.documents.iter_mut().filter(|d| d.status == DocStatus::Processing) {
                    if let Some((stage, message)) = d.doc_id.as_deref().and_then(|doc| failed.get(doc)) {
                        d.status = DocStatus::Failed;
                        d.stage = Some((*stage).to_owned());
                        d.message = Some((*message).to_owned());
                    }
                }
            });
        }
    }

    /// Marks jobs `ids` failed with `error`; generation `number` goes on serving.
    fn fail(&self, ids: &[String], number: u64, error: &str) {
        crate::log(&format!("index {}: {error}", self.name));
        for id in ids {
            self.jobs.update(id, |job| {
                job.state = JobState::Failed;
                job.finished_at = Some(crate::now());
                job.error = Some(error.to_owned());
                job.generation = (number > 0).then_some(number);
                job.kb = Some("old".to_owned());
                for d in
                    job.documents.iter_mut().filter(|d| matches!(d.status, DocStatus::Pending | DocStatus::Processing))
                {
                    d.status = DocStatus::Failed;
                    d.message = Some(error.to_owned());
                }
                job.stage = None;
            });
        }
    }
}

/// `text` with each place in `file`, the staged file of a JSON body (`<job>.jsonl:3`), named as
/// the client sent it (`documents[2]`).
fn body_places(text: &str, file: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(file) {
        out.push_str(&rest[..at]);
        let after = &rest[at + file.len()..];
        let digits: String = after.strip_prefix(':').unwrap_or("").chars().take_while(char::is_ascii_digit).collect();
        match digits.parse::<usize>() {
            Ok(line) => {
                out.push_str(&format!("documents[{}]", line.saturating_sub(1)));
                rest = &after[1 + digits.len()..];
            }
            Err(_) => {
                out.push_str(file);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Sort key that puts `documents[10]` after `documents[9]` and `a.jsonl:10` after `a.jsonl:9`.
fn natural(source: &str) -> (&str, u64, &str) {
    let body = source.trim_end_matches(']');
    let stem = body.trim_end_matches(|c: char| c.is_ascii_digit());
    (stem, body[stem.len()..].parse().unwrap_or(0), source)
}

/// Empties (or creates) `dir`.
fn reset_dir(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("{}: cannot be emptied", dir.display()))?;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("{}: cannot be created", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_in_a_json_body_are_named_as_sent() {
        let file = body_file("j1");
        assert_eq!(body_places("j1.jsonl:3", &file), "documents[2]");
        assert_eq!(
            body_places("j1.jsonl:4: duplicate doc_id `x`, first seen at j1.jsonl:1", &file),
            "documents[3]: duplicate doc_id `x`, first seen at documents[0]"
        );
        assert_eq!(body_places("notes.md: empty", &file), "notes.md: empty");
        assert_eq!(body_places("j1.jsonl without a line", &file), "j1.jsonl without a line");
    }

    #[test]
    fn sources_sort_by_their_numbers() {
        let mut sources = vec!["documents[10]", "documents[9]", "a.jsonl:10", "a.jsonl:2", "b.md"];
        sources.sort_by_key(|s| natural(s));
        assert_eq!(sources, ["a.jsonl:2", "a.jsonl:10", "b.md", "documents[9]", "documents[10]"]);
    }
}
