//! A unit's sandbox reaches its children through a real host: a `workspace-write` child
//! writes its working directory and its own `TMPDIR`, and neither hermes' home (its ledger)
//! nor anything else; the temporary directory goes with the child.

use hermes_ledger::{ChildStatus, Role, Sandbox, SandboxMode};

use crate::common::*;

fn confined(mode: SandboxMode) -> Sandbox {
    Sandbox {
        mode,
        commands_network: false,
        agents_network: false,
    }
}

#[tokio::test]
async fn a_workspace_write_child_writes_its_workspace_and_temp_dir_only() {
    let f = inline_fixture(|_| {}).await;
    let work = tempfile::tempdir().expect("work");
    let outside = tempfile::tempdir().expect("outside");
    let home = f.home.path();
    let script = format!(
        "echo x > made.txt && echo x > \"$TMPDIR/t\" && echo \"$TMPDIR\" && \
         if echo x > {outside}/f 2>/dev/null; then echo outside=ok; fi; \
         if echo x >> {home}/ledger.redb 2>/dev/null; then echo ledger=ok; fi",
        outside = outside.path().display(),
        home = home.display(),
    );
    let mut spec = spec(&[&sh(&script)]);
    spec.cwd = Some(work.path().display().to_string());
    spec.sandbox = confined(SandboxMode::WorkspaceWrite);
    let report = f.host.run_inline(spec, None).await.expect("runs");
    let child = &report.outcomes[0];
    assert_eq!(child.status, ChildStatus::Completed, "{child:?}");
    assert!(work.path().join("made.txt").exists());
    assert!(!child.result.contains("outside=ok"), "{}", child.result);
    assert!(!child.result.contains("ledger=ok"), "{}", child.result);
    let tmpdir = child
        .result
        .lines()
        .next()
        .expect("TMPDIR")
        .trim()
        .to_owned();
    assert!(tmpdir.contains("hermes-"), "{tmpdir}");
    assert!(
        !std::path::Path::new(&tmpdir).exists(),
        "the child's temporary directory is removed once it is done"
    );
}

#[tokio::test]
async fn a_read_only_child_cannot_write_its_working_directory_but_an_orchestrator_writes_the_home()
{
    let f = inline_fixture(|_| {}).await;
    let work = tempfile::tempdir().expect("work");
    let home = f.home.path();
    let probe = format!(
        "if echo x > made.txt 2>/dev/null; then echo work=ok; else echo work=no; fi; \
         if echo x > {}/probe 2>/dev/null; then echo home=ok; else echo home=no; fi",
        home.display()
    );
    let mut leaf = task(&sh(&probe));
    leaf.goal = "leaf".into();
    let orchestrator = hermes_ledger::TaskSpec {
        role: Role::Orchestrator,
        ..leaf.clone()
    };
    let mut spec = hermes_ledger::DispatchSpec::new("u", vec![leaf, orchestrator]);
    spec.cwd = Some(work.path().display().to_string());
    spec.sandbox = confined(SandboxMode::ReadOnly);
    let report = f.host.run_inline(spec, None).await.expect("runs");
    let mut outcomes = report.outcomes.clone();
    outcomes.sort_by_key(|o| o.index);
    assert!(
        outcomes[0].result.contains("work=no") && outcomes[0].result.contains("home=no"),
        "{}",
        outcomes[0].result
    );
    assert!(
        outcomes[1].result.contains("work=no") && outcomes[1].result.contains("home=ok"),
        "{}",
        outcomes[1].result
    );
}
