//! Updates of a served index as jobs: what was asked (documents to add, or to delete), what became
//! of each document, and which kb generation serves the result. Jobs are kept in the index, under
//! `.serve/jobs/` (one JSON file each, beside the folder of the files an upload brought), written
//! at every step, so that a server killed in the middle of an update finds them on restart and
//! finishes them: each step (ingest, the stages, the merge) is idempotent, and until a merge
//! completes the kb on disk is the old one.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

use flexstruct_pipeline::io::files::write_file_atomic;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a job does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// Adds documents (or replaces those of the same ids or files).
    Add,
    /// Deletes documents.
    Delete,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for the index's writer.
    Queued,
    /// Being applied.
    Running,
    /// Applied: its documents are served by `generation` (those that did not fail).
    Done,
    /// Stopped by an error; the index serves the kb it served before (`generation`).
    Failed,
}

/// Where a document of a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DocStatus {
    /// Waiting for the writer.
    Pending,
    /// In a stage (`stage` says which).
    Processing,
    /// Served (added, or deleted) by the job's generation.
    Processed,
    /// Not served: `message` says why.
    Failed,
}

/// One document of a job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobDocument {
    /// Where it came from: `documents[2]` of a JSON body, an uploaded file's name
    /// (`notes.md`, `more.jsonl:3` for a record), or the id of a deleted document.
    pub source: String,
    /// Its id, once known (an added document's is derived from its text when not given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doc_id: Option<String>,
    /// Its title, once read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Where it is.
    pub status: DocStatus,
    /// The stage it is in (`processing`) or failed in (`failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl JobDocument {
    /// A document waiting for the writer.
    pub fn pending(source: impl Into<String>, doc_id: Option<String>) -> JobDocument {
        JobDocument {
            source: source.into(),
            doc_id,
            title: None,
            status: DocStatus::Pending,
            stage: None,
            message: None,
        }
    }
}

/// An update of an index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Job {
    /// Its id.
    pub id: String,
    /// The index it updates.
    pub index: String,
    /// What it does.
    pub kind: JobKind,
    /// Where it is.
    pub state: JobState,
    /// The stage running now (`running`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// When it was asked for (RFC 3339).
    pub created_at: String,
    /// When the writer took it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Its documents.
    pub documents: Vec<JobDocument>,
    /// `done`: the kb generation that serves its changes; `failed`: the one still served (the
    /// kb from before the job).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// Which kb serves now: `new` (with the job's changes) or `old` (without them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kb: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What happened on the way (a restart that resumed it).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub notes: Vec<String>,
    /// Whether its documents came as a JSON body (rather than as uploaded files).
    #[serde(default)]
    pub body: bool,
}

impl Job {
    /// A new queued job of `index`.
    pub fn new(index: &str, kind: JobKind, documents: Vec<JobDocument>) -> Job {
        let now = chrono::Utc::now();
        Job {
            id: format!("{}-{:06x}", now.format("%Y%m%dT%H%M%S%3f"), fastrand::u32(..0x100_0000)),
            index: index.to_owned(),
            kind,
            state: JobState::Queued,
            stage: None,
            created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            started_at: None,
            finished_at: None,
            documents,
            generation: None,
            kb: None,
            error: None,
            notes: Vec::new(),
            body: false,
        }
    }

    /// Whether the job has ended.
    pub fn finished(&self) -> bool {
        matches!(self.state, JobState::Done | JobState::Failed)
    }
}

/// The jobs of one index, kept in `.serve/jobs/` of the index.
#[derive(Debug)]
pub struct Jobs {
    dir: PathBuf,
    inner: Mutex<Inner>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct Inner {
    jobs: BTreeMap<String, Job>,
    queue: VecDeque<String>,
    closed: bool,
}

impl Jobs {
    /// The jobs of the index at `root`: those of earlier runs are read back, and the ones that
    /// had not ended are queued again, noting that a restart resumed them.
    pub fn open(root: &Path) -> anyhow::Result<Jobs> {
        let dir = root.join(".serve").join("jobs");
        std::fs::create_dir_all(&dir).map_err(|e| anyhow::anyhow!("{}: cannot be created: {e}", dir.display()))?;
        let mut inner = Inner::default();
        let entries =
            std::fs::read_dir(&dir).map_err(|e| anyhow::anyhow!("{}: cannot be listed: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for path in files {
            let job: Job = match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
            {
                Ok(job) => job,
                Err(e) => {
                    crate::log(&format!("{}: not a job record ({e}); left alone", path.display()));
                    continue;
                }
            };
            let mut job = job;
            if !job.finished() {
                let was = match (&job.state, &job.stage) {
                    (JobState::Running, Some(stage)) => format!("running, in stage {stage}"),
                    (JobState::Running, None) => "running".to_owned(),
                    _ => "queued".to_owned(),
                };
                job.notes.push(format!("the server stopped while the job was {was}; resumed when it started again"));
                job.state = JobState::Queued;
                job.stage = None;
                inner.queue.push_back(job.id.clone());
            }
            inner.jobs.insert(job.id.clone(), job);
        }
        let jobs = Jobs { dir, inner: Mutex::new(inner), ready: Condvar::new() };
        let resumed: Vec<String> = jobs.lock().queue.iter().cloned().collect();
        for id in resumed {
            jobs.save(&id);
        }
        Ok(jobs)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The folder of the files job `id` brought.
    pub fn files(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Queues `job` (its files, if any, already in [`Jobs::files`]).
    pub fn submit(&self, job: Job) -> Job {
        let id = job.id.clone();
        {
            let mut inner = self.lock();
            inner.jobs.insert(id.clone(), job.clone());
            inner.queue.push_back(id.clone());
        }
        self.save(&id);
        self.ready.notify_all();
        job
    }

    /// Job `id`.
    pub fn get(&self, id: &str) -> Option<Job> {
        self.lock().jobs.get(id).cloned()
    }

    /// The id of the newest job not yet ended that holds document `doc_id` (of `kind`, if given).
    pub fn open_job_of(&self, doc_id: &str, kind: Option<JobKind>) -> Option<String> {
        let inner = self.lock();
        let mut open = inner.jobs.values().rev().filter(|j| !j.finished() && kind.is_none_or(|k| j.kind == k));
        open.find(|j| j.documents.iter().any(|d| d.doc_id.as_deref() == Some(doc_id))).map(|j| j.id.clone())
    }

    /// Every job, newest first.
    pub fn all(&self) -> Vec<Job> {
        self.lock().jobs.values().rev().cloned().collect()
    }

    /// Whether jobs wait.
    pub fn has_queued(&self) -> bool {
        !self.lock().queue.is_empty()
    }

    /// Jobs by state.
    pub fn counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::from([("queued", 0), ("running", 0), ("done", 0), ("failed", 0)]);
        for job in self.lock().jobs.values() {
            let state = match job.state {
                JobState::Queued => "queued",
                JobState::Running => "running",
                JobState::Done => "done",
                JobState::Failed => "failed",
            };
            *counts.entry(state).or_default() += 1;
        }
        counts
    }

    /// Waits for queued jobs and takes them all (in order); `None` once closed.
    pub fn take(&self) -> Option<Vec<String>> {
        let mut inner = self.lock();
        while inner.queue.is_empty() && !inner.closed {
            inner = self.ready.wait(inner).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        if inner.closed {
            return None;
        }
        Some(inner.queue.drain(..).collect())
    }

    /// The queued jobs, taken without waiting.
    pub fn take_now(&self) -> Vec<String> {
        self.lock().queue.drain(..).collect()
    }

    /// Whether [`Jobs::close`] was called.
    pub fn closed(&self) -> bool {
        self.lock().closed
    }

    /// Stops [`Jobs::take`].
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Changes job `id` with `change` and writes it.
    pub fn update(&self, id: &str, change: impl FnOnce(&mut Job)) {
        {
            let mut inner = self.lock();
            let Some(job) = inner.jobs.get_mut(id) else { return };
            change(job);
        }
        self.save(id);
    }

    /// Writes job `id` to its file (a failure is logged: the job goes on in memory).
    fn save(&self, id: &str) {
        let Some(job) = self.get(id) else { return };
        let bytes = match serde_json::to_vec_pretty(&job) {
            Ok(bytes) => bytes,
            Err(e) => return crate::log(&format!("job {id}: cannot be written: {e}")),
        };
        if let Err(e) = write_file_atomic(&self.dir.join(format!("{id}.json")), &bytes) {
            crate::log(&format!("job {id}: cannot be written: {}", flexstruct_pipeline::core::chain_message(&e)));
        }
    }

    /// Forgets all but the `keep` newest ended jobs, in memory and in the index (job ids begin
    /// with their time, so their order is their age).
    pub fn forget_old(&self, keep: usize) {
        let forgotten: Vec<String> = {
            let mut inner = self.lock();
            let ended: Vec<String> = inner.jobs.values().filter(|j| j.finished()).map(|j| j.id.clone()).collect();
            let old = ended[..ended.len().saturating_sub(keep)].to_vec();
            for id in &old {
                inner.jobs.remove(id);
            }
            old
        };
        for id in forgotten {
            let path = self.dir.join(format!("{id}.json"));
            if let Err(e) = std::fs::remove_file(&path) {
                crate::log(&format!("{}: cannot be removed: {e}", path.display()));
            }
        }
    }

    /// Removes the files job `id` brought (once applied, they are in the index).
    pub fn remove_files(&self, id: &str) {
        let dir = self.files(id);
        if dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            crate::log(&format!("{}: cannot be removed: {e}", dir.display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unfinished_jobs_are_resumed_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Jobs::open(dir.path()).unwrap();
        let a = jobs.submit(Job::new("x", JobKind::Add, vec![JobDocument::pending("a.md", None)]));
        let b = jobs.submit(Job::new("x", JobKind::Delete, vec![JobDocument::pending("d1", Some("d1".into()))]));
        assert_eq!(jobs.take().unwrap(), vec![a.id.clone(), b.id.clone()]);
        jobs.update(&a.id, |j| {
            j.state = JobState::Done;
            j.generation = Some(2);
        });
        jobs.update(&b.id, |j| {
            j.state = JobState::Running;
            j.stage = Some("merge".into());
            j.body = true;
        });
        drop(jobs);
        let again = Jobs::open(dir.path()).unwrap();
        assert_eq!(again.get(&a.id).unwrap().state, JobState::Done);
        let resumed = again.get(&b.id).unwrap();
        assert_eq!((resumed.state, resumed.body), (JobState::Queued, true));
        assert!(resumed.notes[0].contains("in stage merge"), "{:?}", resumed.notes);
        assert_eq!(again.take_now(), vec![b.id.clone()]);
        assert_eq!(again.counts()["done"], 1);
    }

    #[test]
    fn only_the_newest_ended_jobs_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = Jobs::open(dir.path()).unwrap();
        let mut ids = Vec::new();
        for _ in 0..4 {
            let job = jobs.submit(Job::new("x", JobKind::Add, Vec::new()));
            std::thread::sleep(std::time::Duration::from_millis(2));
            ids.push(job.id);
        }
        jobs.take();
        for id in &ids[..3] {
            jobs.update(id, |j| j.state = JobState::Done);
        }
        jobs.forget_old(2);
        let kept: Vec<String> = jobs.all().into_iter().map(|j| j.id).collect();
        assert_eq!(kept, vec![ids[3].clone(), ids[2].clone(), ids[1].clone()], "the open job and the two newest ended");
        assert!(!dir.path().join(format!(".serve/jobs/{}.json", ids[0])).exists());
        assert_eq!(Jobs::open(dir.path()).unwrap().all().len(), 3);
    }
}
