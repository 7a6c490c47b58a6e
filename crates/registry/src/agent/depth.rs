//! How deep a chain of delegations may go. hermes marks each agent child's
//! environment with its role and depth; a hermes process started inside such a child (a
//! `hermes delegate`, its own MCP server) reads the marks and refuses to dispatch from a `leaf`
//! child, or from any child at `delegation.max_depth`.

/// The variable carrying an agent child's role (`leaf` or `orchestrator`).
pub const CHILD_ROLE_VAR: &str = "HERMES_CHILD_ROLE";

/// The variable carrying a child's depth in the delegation chain (1: dispatched from outside
/// any child).
pub const CHILD_DEPTH_VAR: &str = "HERMES_CHILD_DEPTH";

/// Why a process inside a child may not dispatch.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DepthRefusal {
    /// Inside a `leaf` agent child.
    #[error(
        "this is a leaf child (depth {depth}): it cannot delegate further; do the work here, or have the parent dispatch it with --role orchestrator"
    )]
    Leaf {
        /// The child's depth.
        depth: u32,
    },
    /// Inside a child at the deepest depth allowed.
    #[error(
        "delegation depth limit reached: this child is at depth {depth} and delegation.max_depth is {max}; do the work here"
    )]
    TooDeep {
        /// The child's depth.
        depth: u32,
        /// `delegation.max_depth`.
        max: u32,
    },
}

/// The depth of a unit dispatched by a process whose environment holds `role` and `depth`
/// (the values of [`CHILD_ROLE_VAR`] and [`CHILD_DEPTH_VAR`], if set), or why it may not
/// dispatch at all.
pub fn depth_for_dispatch(
    role: Option<&str>,
    depth: Option<&str>,
    max_depth: u32,
) -> Result<u32, DepthRefusal> {
    let depth = depth
        .and_then(|d| d.trim().parse::<u32>().ok())
        .unwrap_or(0);
    if role == Some("leaf") {
        return Err(DepthRefusal::Leaf { depth });
    }
    if depth >= max_depth.max(1) {
        return Err(DepthRefusal::TooDeep {
            depth,
            max: max_depth,
        });
    }
    Ok(depth + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_never_delegate_and_orchestrators_only_above_the_limit() {
        assert_eq!(depth_for_dispatch(None, None, 2), Ok(1));
        assert_eq!(
            depth_for_dispatch(Some("orchestrator"), Some("1"), 2),
            Ok(2)
        );
        assert_eq!(
            depth_for_dispatch(Some("orchestrator"), Some("2"), 2),
            Err(DepthRefusal::TooDeep { depth: 2, max: 2 })
        );
        assert_eq!(
            depth_for_dispatch(Some("leaf"), Some("1"), 2),
            Err(DepthRefusal::Leaf { depth: 1 })
        );
        // A plain command child (no role) may run hermes, within the depth limit.
        assert_eq!(depth_for_dispatch(None, Some("1"), 2), Ok(2));
        assert_eq!(depth_for_dispatch(None, Some("junk"), 2), Ok(1));
    }
}
