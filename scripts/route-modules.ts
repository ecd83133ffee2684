/**
 * The modules a command's usual route imports lazily, which its route file holds (paths relative
 * to dist/src): its definition, its command, and what the command loads on its way. For `pull`, the
 * pull through an agent (the fan-out's flow); its other routes (from the origin, `--scheduler`,
 * `--seeds`) load the regular build's modules. Read by scripts/bundle-commands.ts, which makes the
 * route files, and by test/cli/bundles.test.ts, which checks them; bin/weightcast.cjs names the
 * commands that have one.
 */
export const ROUTES: Readonly<Record<string, readonly string[]>> = {
  agent: ['cli/definitions/agent.js', 'cli/commands/agent.js'],
  pull: [
    'cli/definitions/pull.js',
    'cli/commands/pull.js',
    'swarm/agent-pull.js',
    'auth/credentials.js',
    'pull/place.js',
  ],
};
