//! `flexstruct-paths`: `kb/entities`, `kb/edges` → the path index of `--mode paths` (SG-RAG).

use std::process::ExitCode;

use flexstruct_pipeline::compose;
use flexstruct_pipeline::stages::paths;
use flexstruct_stages::table_stage_main;

fn main() -> ExitCode {
    table_stage_main(
        paths::STAGE,
        "Builds the path index of structure-guided retrieval (--mode paths) from the merged kb: one node per entity name, its label embedding and dominant embedding, and the paths of 1 to paths.max_length edges (kb/path_nodes, kb/paths, kb/path_members). Run it after a merge; it does nothing when the kb has not changed.",
        compose::paths,
    )
}
