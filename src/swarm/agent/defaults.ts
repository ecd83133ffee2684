/**
 * The agent's defaults on their own, with no imports, so the CLI's help can show them and `pull` can
 * look for an agent without loading the agent.
 */

/** The port `weightcast agent` listens on unless told otherwise (and where `pull` looks for one). */
export const AGENT_PORT_DEFAULT = 7100;
