//! Agent CLIs as children: how a dispatch by agent becomes an argv (from the agents'
//! child profiles, `hermes_agents`), and the stream adapters that read an agent's structured
//! stdout as it arrives, one per stream format ([`hermes_agents::StreamFormat`]): an agent's
//! entry names its format, and no file here names an agent.
//! `[agents.NAME]` in `config.toml` adds commands of its own or pins a built-in's flags.

mod depth;
mod event;
mod headless_events;
mod profile;
mod prompt;
mod sdk_messages;
mod stream;
mod thread_items;

pub use depth::{CHILD_DEPTH_VAR, CHILD_ROLE_VAR, DepthRefusal, depth_for_dispatch};
pub use event::{Report, StreamEvent};
pub use profile::{
    Adapter, AgentCommand, AgentError, AgentRequest, ReadState, adapter_by_name, adapter_for,
    command_for, find_program, read_line,
};
pub use prompt::{subagent_prompt, tools_for};
pub use stream::{AgentStream, Sink, usage_words};
