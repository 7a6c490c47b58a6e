//! The prompt an agent child gets, built the way upstream builds a subagent's: the goal, the
//! context the parent gave, and the parent's instructions that it is a subagent that must work
//! on its own and report what it did and verified. And the tool allow-list that toolsets and
//! role map onto.

use hermes_ledger::Role;

use hermes_agents::ChildProfile;

/// The prompt of an agent child: `goal`, `context`, and what its `role` and `depth` allow.
pub fn subagent_prompt(
    goal: &str,
    context: Option<&str>,
    role: Role,
    depth: u32,
    max_depth: u32,
) -> String {
    let mut p = String::from(
        "You are a subagent: a parent agent delegated the task below to you and is not \
         watching. Work on it on your own; you cannot ask the parent questions.\n\nGOAL:\n",
    );
    p.push_str(goal.trim());
    p.push('\n');
    if let Some(context) = context.map(str::trim).filter(|c| !c.is_empty()) {
        p.push_str("\nCONTEXT FROM THE PARENT:\n");
        p.push_str(context);
        p.push('\n');
    }
    p.push_str(
        "\nWhen you are done, end with a concise report for the parent: what you did, what you \
         verified and how (commands run, tests and their results), and anything left undone or \
         uncertain. Your final message is returned to the parent as your result.\n",
    );
    match role {
        Role::Leaf => p.push_str(
            "\nYou are a leaf: do the work yourself. You cannot delegate to other agents.\n",
        ),
        Role::Orchestrator if depth < max_depth => p.push_str(&format!(
            "\nYou are an orchestrator (depth {depth} of at most {max_depth}): you may split the \
             work and delegate parts of it with hermes (the delegate_task tool, or `hermes -z \
             --agent NAME --goal …`), then combine the results.\n"
        )),
        Role::Orchestrator => {
            p.push_str("\nYou are at the deepest delegation level: do the work yourself.\n")
        }
    }
    p
}

/// The tool names an agent may use for `toolsets` (empty: the agent's defaults). A toolset the
/// agent knows maps onto its tools; any other name is taken as a tool name of the agent's own.
pub fn tools_for(child: &ChildProfile, toolsets: &[String]) -> Vec<String> {
    let mut tools: Vec<String> = Vec::new();
    for set in toolsets.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        let known = (child.toolset)(set);
        let names: Vec<String> = if known.is_empty() {
            vec![set.to_owned()]
        } else {
            known.iter().map(|t| (*t).to_owned()).collect()
        };
        for name in names {
            if !tools.contains(&name) {
                tools.push(name);
            }
        }
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_carries_goal_context_and_what_the_role_allows() {
        let leaf = subagent_prompt("fix the test", Some("it is flaky"), Role::Leaf, 1, 2);
        assert!(leaf.contains("GOAL:\nfix the test\n"), "{leaf}");
        assert!(leaf.contains("CONTEXT FROM THE PARENT:\nit is flaky\n"));
        assert!(leaf.contains("what you verified"));
        assert!(leaf.contains("cannot delegate"));
        let orch = subagent_prompt("plan", None, Role::Orchestrator, 1, 2);
        assert!(!orch.contains("CONTEXT"));
        assert!(orch.contains("may split the work"));
        let deepest = subagent_prompt("plan", None, Role::Orchestrator, 2, 2);
        assert!(deepest.contains("deepest delegation level"));
    }
}
