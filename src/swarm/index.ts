/**
 * `weightcast/swarm`: many hosts sharing one model's verified pieces. The client side: find the
 * agent of this machine (`findLocalAgent`) and pull through it (`agentPull`), or join the swarm
 * in-process for the length of one pull (`swarmPull`). The services: an agent per host
 * (`Agent.start`) and the scheduler that decides every transfer (`startScheduler`).
 */

export { findLocalAgent, type LocalAgent } from './local-agent.js';
export { agentPull, type AgentPlacement, type AgentPullOptions } from './agent-pull.js';
export { swarmPull, type SwarmPullOptions, type SwarmPullResult } from './swarm-pull.js';
export {
  Agent,
  type AgentEvent,
  type AgentOptions,
  type JoinOptions,
  type ModelStatus,
} from './agent/agent.js';
export { AGENT_PORT_DEFAULT } from './agent/defaults.js';
export {
  startScheduler,
  type SchedulerEvent,
  type SchedulerOptions,
  type SchedulerServer,
} from './scheduler/scheduler-server.js';
