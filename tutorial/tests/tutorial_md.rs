//! examples/tutorial.md shows this crate's files whole: every fenced block whose first
//! line names a file (`// src/lib.rs`, `# Cargo.toml`, ...) must be that file, byte for
//! byte, so that the tutorial compiles as written (this crate is built and tested with
//! the workspace).

use std::path::Path;

#[test]
fn every_file_block_of_the_tutorial_is_this_crates_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let markdown = std::fs::read_to_string(root.join("../examples/tutorial.md")).unwrap();
    let mut shown = Vec::new();
    let mut lines = markdown.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("```") || line.len() == 3 {
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let Some(first) = block.first() else { continue };
        // `// path: what it is` or `# path`: the file's own first line.
        let named = first
            .strip_prefix("// ")
            .or_else(|| first.strip_prefix("# "))
            .and_then(|rest| rest.split([':', ' ']).next())
            .filter(|path| root.join(path).is_file() && path.contains('.'));
        let Some(path) = named else { continue };
        let file = std::fs::read_to_string(root.join(path)).unwrap();
        let text = block.join("\n") + "\n";
        assert_eq!(
            text, file,
            "examples/tutorial.md's block for {path} differs from tutorial/{path}"
        );
        shown.push(path.to_owned());
    }
    shown.sort();
    let expected = [
        "Cargo.toml",
        "build.rs",
        "proto/hello.proto",
        "src/bin/client.rs",
        "src/bin/server.rs",
        "src/lib.rs",
        "tests/greeter.rs",
    ];
    assert_eq!(
        shown, expected,
        "the tutorial shows every file of the crate once"
    );
}
