//! Documents added and deleted while the index answers: JSON bodies and uploaded files, a bad
//! document failing alone, statuses, the new kb served at once and whole.

use serde_json::{Value, json};

use crate::util::*;

const FERRY: &str = "The electric ferry Tern carries 96 passengers between Orrin Quay and the island of Vell. \
                     She was launched in 2021 by the Kittle yard, and her batteries charge in eleven minutes.";

fn documents_of(job: &Value) -> Vec<(String, String)> {
    job["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["source"].as_str().unwrap().to_owned(), d["status"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_added_as_json_are_answerable_and_a_bad_one_fails_alone() {
    let (_dir, index) = sample_copy();
    let server = serve(&[("live", &index)], Options::default()).await;
    let body = json!({"documents": [
        {"doc_id": "ferry", "title": "The ferry Tern", "text": FERRY},
        {"title": "Nothing", "text": "   "},
        {"title": "No text"},
        {"text": "The Vell island school has 41 pupils and one teacher, Ada Quill."},
        {"doc_id": "ferry", "text": "A second document under the same id."},
    ]});
    let (status, accepted) = server.post("/v1/indexes/live/documents", body).await;
    assert_eq!(status, 202, "{accepted}");
    let id = accepted["id"].as_str().unwrap();
    assert_eq!(accepted["status_url"], format!("/v1/indexes/live/jobs/{id}"));
    assert_eq!(accepted["job"]["state"], "queued");
    let job = server.wait_job("live", id).await;
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["generation"], 2);
    assert_eq!(job["kb"], "new");
    assert_eq!(
        documents_of(&job),
        [
            ("documents[0]".to_owned(), "processed".to_owned()),
            ("documents[1]".to_owned(), "failed".to_owned()),
            ("documents[2]".to_owned(), "failed".to_owned()),
            ("documents[3]".to_owned(), "processed".to_owned()),
            ("documents[4]".to_owned(), "failed".to_owned()),
        ]
    );
    assert_eq!(
        job["documents"][4]["message"], "documents[4]: duplicate doc_id `ferry`, first seen at documents[0]",
        "{job}"
    );
    assert!(job["documents"][1]["message"].as_str().unwrap().starts_with("documents[1]: "), "{job}");
    assert!(job["documents"][2]["message"].as_str().unwrap().contains("text"), "{job}");
    assert_eq!(job["documents"][0]["doc_id"], "ferry");
    let derived = job["documents"][3]["doc_id"].as_str().unwrap();
    assert!(derived.starts_with("doc-"), "{job}");

    // Answerable at once, cited from the new document.
    let (status, answer) =
        server.post("/v1/query", json!({"question": "How many passengers does the electric ferry Tern carry?"})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["answer"].as_str().unwrap().contains("96"), "{answer}");
    assert!(answer["citations"].as_array().unwrap().iter().any(|c| c["doc_id"] == "ferry"), "{answer}");
    let (status, doc) = server.get("/v1/indexes/live/documents/ferry").await;
    assert_eq!((status, doc["title"].as_str(), doc["generation"].as_u64()), (200, Some("The ferry Tern"), Some(2)));
    assert_eq!(doc["text"], FERRY);

    // The list shows the served documents and the failed ones.
    let (_, page) = server.get("/v1/indexes/live/documents?limit=1000").await;
    // (The second `ferry` failed, but `ferry` is served: the list shows the served one.)
    assert_eq!(page["total"], 5 + 2 + 2, "{page}");
    let ferry = page["documents"].as_array().unwrap().iter().find(|d| d["doc_id"] == "ferry").unwrap();
    assert_eq!(ferry["source"], format!("{id}.jsonl:1"), "the source names the job and the record");
    let (_, failed) = server.get("/v1/indexes/live/documents?status=failed").await;
    assert_eq!(failed["total"], 2, "{failed}");
    assert_eq!(failed["documents"][0]["job"], id);
    let (_, second) = server.get("/v1/indexes/live/documents?offset=2&limit=3").await;
    assert_eq!(second["documents"].as_array().unwrap().len(), 3);

    // Sending the same document again with a changed text replaces it.
    let changed = FERRY.replace("96 passengers", "120 passengers");
    let (_, accepted) =
        server.post("/v1/indexes/live/documents", json!({"documents": [{"doc_id": "ferry", "text": changed}]})).await;
    let job = server.wait_job("live", accepted["id"].as_str().unwrap()).await;
    assert_eq!((job["state"].as_str(), job["generation"].as_u64()), (Some("done"), Some(3)), "{job}");
    let (_, doc) = server.get("/v1/indexes/live/documents/ferry").await;
    assert!(doc["text"].as_str().unwrap().contains("120 passengers"));

    // Deleted: gone from the kb, from the documents and from answers.
    let (status, accepted) = server.delete("/v1/indexes/live/documents/ferry").await;
    assert_eq!(status, 202, "{accepted}");
    let job = server.wait_job("live", accepted["id"].as_str().unwrap()).await;
    assert_eq!((job["state"].as_str(), job["kind"].as_str()), (Some("done"), Some("delete")), "{job}");
    assert_eq!(documents_of(&job), [("ferry".to_owned(), "processed".to_owned())]);
    let (status, _) = server.get("/v1/indexes/live/documents/ferry").await;
    assert_eq!(status, 404);
    let (_, answer) =
        server.post("/v1/query", json!({"question": "How many passengers does the electric ferry Tern carry?"})).await;
    assert!(answer["evidence"].as_array().unwrap().iter().all(|e| e["doc_id"] != "ferry"), "{answer}");
    let (status, body) = server.delete("/v1/indexes/live/documents/ferry").await;
    assert_eq!((status, error(&body).0), (404, "doc_id"));

    // Malformed bodies are refused whole.
    for (body, field) in [
        (json!({}), "documents"),
        (json!({"documents": []}), "documents"),
        (json!({"documents": "text"}), "documents"),
        (json!({"documents": [3]}), "documents[0]"),
        (json!({"documents": [], "more": 1}), "more"),
    ] {
        let (status, error_body) = server.post("/v1/indexes/live/documents", body.clone()).await;
        assert_eq!((status, error(&error_body).0), (400, field), "{body}: {error_body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploaded_files_are_documents_and_an_unreadable_one_fails_alone() {
    let (_dir, index) = sample_copy();
    let server = serve(&[("live", &index)], Options::default()).await;
    let part = |name: &str, bytes: &[u8]| reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_owned());
    let form = reqwest::multipart::Form::new()
        .part("file", part("ferry notes.md", format!("# The ferry Tern\n\n{FERRY}\n").as_bytes()))
        .part("file", part("../../../etc/school.txt", b"The Vell island school has 41 pupils."))
        .part(
            "file",
            part(
                "records.jsonl",
                b"{\"doc_id\": \"r1\", \"text\": \"The quay was rebuilt in 1999.\"}\n{\"doc_id\": \"r2\"}\n",
            ),
        )
        .part("file", part("broken.txt", b"\xff\xfe not text"))
        .part("file", part("slides.pdf", b"%PDF-1.4"));
    let response = server.client.post(server.url("/v1/indexes/live/documents")).multipart(form).send().await.unwrap();
    let (status, accepted) = status_json(response).await;
    assert_eq!(status, 202, "{accepted}");
    let job = server.wait_job("live", accepted["id"].as_str().unwrap()).await;
    assert_eq!(job["state"], "done", "{job}");
    let statuses = documents_of(&job);
    for (source, status) in [
        ("broken.txt", "failed"),
        ("ferry notes.md", "processed"),
        ("records.jsonl:1", "processed"),
        ("records.jsonl:2", "failed"),
        ("school.txt", "processed"),
        ("slides.pdf", "failed"),
    ] {
        assert!(statuses.contains(&(source.to_owned(), status.to_owned())), "{source} {status}: {statuses:?}");
    }
    // `done` says the job was applied; a note says how many of its documents were not.
    assert_eq!(
        job["notes"],
        serde_json::json!([
            "3 of the 6 documents failed (each one's message is in `documents`); the others are served"
        ])
    );
    let broken = job["documents"].as_array().unwrap().iter().find(|d| d["source"] == "broken.txt").unwrap();
    assert!(broken["message"].as_str().unwrap().contains("invalid UTF-8"), "{broken}");
    let ferry = job["documents"].as_array().unwrap().iter().find(|d| d["source"] == "ferry notes.md").unwrap();
    assert_eq!(ferry["title"], "The ferry Tern");
    let ferry_id = ferry["doc_id"].as_str().unwrap().to_owned();
    let (status, doc) = server.get(&format!("/v1/indexes/live/documents/{ferry_id}")).await;
    let (_, list) = server.get("/v1/indexes/live/documents").await;
    assert_eq!(status, 200, "{doc}\n{job}\n{list}");

    // The same file name uploaded again replaces the document its first version gave.
    let form = reqwest::multipart::Form::new().part(
        "file",
        part("ferry notes.md", format!("# The ferry Tern\n\n{}\n", FERRY.replace("96", "98")).as_bytes()),
    );
    let response = server.client.post(server.url("/v1/indexes/live/documents")).multipart(form).send().await.unwrap();
    let (_, accepted) = status_json(response).await;
    let job = server.wait_job("live", accepted["id"].as_str().unwrap()).await;
    let new_id = job["documents"][0]["doc_id"].as_str().unwrap();
    assert_ne!(new_id, ferry_id);
    let (status, _) = server.get(&format!("/v1/indexes/live/documents/{ferry_id}")).await;
    assert_eq!(status, 404, "the earlier version is still served");
    let (status, _) = server.get(&format!("/v1/indexes/live/documents/{new_id}")).await;
    assert_eq!(status, 200);

    // No file, a part without a file name, the size limit.
    let empty = reqwest::multipart::Form::new().text("note", "hello");
    let response = server.client.post(server.url("/v1/indexes/live/documents")).multipart(empty).send().await.unwrap();
    let (status, body) = status_json(response).await;
    assert_eq!((status, error(&body).0), (400, "note"), "{body}");
    // Nothing was left in the index's upload folders by the refused uploads.
    let leftovers: Vec<_> = std::fs::read_dir(index.join(".serve/jobs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
