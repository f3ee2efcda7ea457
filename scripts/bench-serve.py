#!/usr/bin/env python3
"""Times flexstruct-serve on an index (`make bench-serve`): start to first answer, resident memory
beside the index's vectors and texts, requests/s and p50/p99 of /v1/retrieve and /v1/query at 1,
4 and 16 clients (each client one request at a time over a kept-alive connection; with the
server's CPU time a request and the client's own CPU share), the same
questions answered by one flexstruct-query process each, and the time from uploading one small
document to its being answerable. The index is served from a hard-linked copy (the upload and its
deletion never touch the original). Standard library only.

With --baseline SMALL_INDEX (make bench-serve uses the sample's), the resident memory of a server
of that small index is measured first, after the same requests: what the process takes whatever it
serves (the embedding model, its runtime, the tokenizer, what answering grows), so that what the
index itself adds can be told apart. The index's own count of the heap it keeps, by part, is read
from /metrics beside it.

--load-only times /v1/retrieve and /v1/query alone (no memory baseline, upload or per-process
run); --serve-binary runs another build of flexstruct-serve (to compare two side by side).

Usage: bench-serve.py INDEX QUESTIONS.jsonl BIN_DIR OUT.json [--requests N] [--clients 1,4,16]
       [--baseline SMALL_INDEX] [--workers N] [--load-only] [--serve-binary PATH]
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(conn, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    headers = {"content-type": "application/json"} if data is not None else {}
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    return response.status, json.loads(payload) if payload else None


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round((len(ordered) - 1) * p)))]


def cpu_s(pid):
    """CPU seconds (user and system) process `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(port, path, questions, clients, total, server_pid):
    """`total` requests by `clients` threads, one at a time each: requests/s, p50 and p99 ms,
    errors, the server's CPU milliseconds a request and the client's CPU share."""
    latencies, errors = [], []
    counter = iter(range(total))
    lock = threading.Lock()

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        while True:
            with lock:
                n = next(counter, None)
            if n is None:
                break
            started = time.perf_counter()
            status, body = request(conn, "POST", path, {"question": questions[n % len(questions)], "id": str(n)})
            elapsed = time.perf_counter() - started
            with lock:
                (latencies if status == 200 else errors).append(elapsed if status == 200 else (status, body))
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started, cpu, server_cpu = time.perf_counter(), time.process_time(), cpu_s(server_pid)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    server_cpu = cpu_s(server_pid) - server_cpu
    return {
        "clients": clients,
        "requests": total,
        "errors": len(errors),
        "requests_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1),
        "server_cpu_ms_per_request": round(server_cpu * 1000 / max(1, total), 2),
        # The client's own CPU time (every thread), as a share of one core's wall time: what the
        # measuring takes of the cores the server runs on.
        "client_cpu_per_wall": round(cpu / wall, 2),
    }


def first_answer(port, question, server):
    """Waits for the server on `port` to answer `question`; its connection."""
    conn = None
    while True:
        try:
            conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            status, _ = request(conn, "POST", "/v1/query", {"question": question})
            if status == 200:
                return conn
        except OSError:
            conn = None
            time.sleep(0.05)
        if server.poll() is not None:
            sys.exit("the server stopped")


def history(port, questions, clients, requests, pid, show=False):
    """The measured load: for /v1/retrieve, then /v1/query, a warm-up and `requests` requests at
    each count of `clients`; the runs."""
    runs = []
    for path in ["/v1/retrieve", "/v1/query"]:
        load(port, path, questions, 4, min(120, requests), pid)  # warm-up
        for n in clients:
            run = load(port, path, questions, n, requests, pid)
            run["endpoint"] = path
            runs.append(run)
            if show:
                print(json.dumps(run), flush=True)
    return runs


def index_memory_mb(port):
    """What the served index says it keeps on the heap, by part (`flexstruct_index_memory_bytes`)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/metrics")
    parts = {}
    for line in conn.getresponse().read().decode().splitlines():
        if line.startswith("flexstruct_index_memory_bytes{"):
            part = line.split('part="', 1)[1].split('"', 1)[0]
            parts[part] = round(float(line.rsplit(" ", 1)[1]) / 2**20, 1)
    conn.close()
    parts["total"] = round(sum(parts.values()), 1)
    return parts


def sql(bin_dir, index, query):
    out = subprocess.run([f"{bin_dir}/flexstruct-sql", "--index", index, "--format", "json", query],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("index")
    parser.add_argument("questions")
    parser.add_argument("bin")
    parser.add_argument("out")
    parser.add_argument("--requests", type=int, default=670)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--per-process", type=int, default=10)
    parser.add_argument("--baseline")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--load-only", action="store_true")
    parser.add_argument("--serve-binary")
    args = parser.parse_args()
    serve = args.serve_binary or f"{args.bin}/flexstruct-serve"
    questions = [json.loads(l)["question"] for l in open(args.questions) if l.strip()]
    result = {"index": args.index, "questions": len(questions), "workers": args.workers}

    # What the index holds: its vectors (the vector files) and its texts.
    vector_bytes = 0
    for table in ["entities", "hyperedges", "edges", "chunks"]:
        path = os.path.join(args.index, "kb", table, "vectors.f32")
        if os.path.exists(path):
            vector_bytes += os.path.getsize(path)
    texts = sql(args.bin, args.index,
                "SELECT (SELECT sum(octet_length(text)) FROM documents) AS documents, "
                "(SELECT sum(octet_length(text)) + sum(octet_length(ref_text)) FROM kb.hyperedges) AS hyperedges, "
                "(SELECT sum(octet_length(name)) + sum(octet_length(summary)) FROM kb.entities) AS entities, "
                "(SELECT sum(octet_length(text)) FROM kb.edges) AS edges, "
                "(SELECT sum(octet_length(text)) FROM kb.chunks) AS chunks, "
                "(SELECT sum(octet_length(text)) FROM kb.clusters) AS clusters")
    text_bytes = sum(v or 0 for v in texts.values())
    result["vectors_mb"] = round(vector_bytes / 2**20, 1)
    result["texts_mb"] = round(text_bytes / 2**20, 1)

    clients = [int(c) for c in args.clients.split(",")]
    if args.baseline and not args.load_only:
        # The small index's server gets the same requests as the measured one before its memory
        # is read: what the process itself grows by while answering (the runtime's buffers for
        # larger batches, each thread's allocator pages) is then on both sides of the difference.
        port = free_port()
        small = subprocess.Popen([serve, "--index", f"small={args.baseline}", "--listen",
                                  f"127.0.0.1:{port}", "--quiet", "--workers", str(args.workers)],
                                 stderr=subprocess.DEVNULL)
        try:
            first_answer(port, questions[0], small)
            result["rss_small_index_after_first_answer_mb"] = round(rss_mb(small.pid), 1)
            history(port, questions, clients, args.requests, small.pid)
            result["rss_small_index_mb"] = round(rss_mb(small.pid), 1)
        finally:
            small.terminate()
            small.wait()

    work = tempfile.mkdtemp()
    copy = os.path.join(work, "index")
    subprocess.run(["cp", "-al", args.index, copy], check=True)
    port = free_port()
    started = time.perf_counter()
    log = open(os.path.join(work, "serve.log"), "w")
    server = subprocess.Popen([serve, "--index", f"bench={copy}", "--listen",
                               f"127.0.0.1:{port}", "--quiet", "--workers", str(args.workers)], stderr=log)
    try:
        conn = first_answer(port, questions[0], server)
        result["start_to_first_answer_s"] = round(time.perf_counter() - started, 2)
        result["rss_after_first_answer_mb"] = round(rss_mb(server.pid), 1)

        result["load"] = history(port, questions, clients, args.requests, server.pid, show=True)
        result["rss_after_load_mb"] = round(rss_mb(server.pid), 1)
        result["index_memory_mb"] = index_memory_mb(port)
        if args.load_only:
            raise StopIteration

        # One small document: upload → job done → an answer that cites it.
        timings = []
        for i in range(3):
            doc_id = f"bench-note-{i}"
            text = (f"Bench note {i}: the survey vessel Kittiwake {i} mapped the Orrin shoal in {1990 + i} "
                    f"with a crew of {7 + i}, led by the hydrographer Mara Ellison {i}.")
            question = f"Which survey vessel mapped the Orrin shoal in {1990 + i}?"
            t0 = time.perf_counter()
            status, accepted = request(conn, "POST", "/v1/indexes/bench/documents",
                                       {"documents": [{"doc_id": doc_id, "title": f"Bench note {i}", "text": text}]})
            assert status == 202, accepted
            while True:
                _, job = request(conn, "GET", f"/v1/indexes/bench/jobs/{accepted['id']}")
                if job["state"] in ("done", "failed"):
                    break
                time.sleep(0.02)
            done = time.perf_counter() - t0
            _, answer = request(conn, "POST", "/v1/query", {"question": question})
            cited = any(e["doc_id"] == doc_id for e in answer["evidence"])
            answerable = time.perf_counter() - t0
            t1 = time.perf_counter()
            _, deleted = request(conn, "DELETE", f"/v1/indexes/bench/documents/{doc_id}")
            while True:
                _, job = request(conn, "GET", f"/v1/indexes/bench/jobs/{deleted['id']}")
                if job["state"] in ("done", "failed"):
                    break
                time.sleep(0.02)
            timings.append({"job_done_s": round(done, 2), "answerable_s": round(answerable, 2), "in_evidence": cited,
                            "state": job["state"], "delete_s": round(time.perf_counter() - t1, 2)})
            print(json.dumps(timings[-1]), flush=True)
        result["upload"] = timings
        result["rss_after_updates_mb"] = round(rss_mb(server.pid), 1)
    except StopIteration:
        pass
    finally:
        server.terminate()
        server.wait()
        log.close()

    # The same questions, one flexstruct-query process each.
    n = 0 if args.load_only else min(args.per_process, len(questions))
    t0 = time.perf_counter()
    for q in questions[:n]:
        subprocess.run([f"{args.bin}/flexstruct-query", "--index", args.index, "--quiet", "--jsonl", q],
                       check=True, capture_output=True)
    if n:
        per_process = (time.perf_counter() - t0) / n
        result["per_process_s"] = round(per_process, 2)
        result["per_process_questions_per_s"] = round(1 / per_process, 3)
    shutil.rmtree(work)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "load"}, indent=2))


if __name__ == "__main__":
    main()
