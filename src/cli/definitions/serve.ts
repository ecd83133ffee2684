/** `weightcast serve DIR`: flags and help; the work is in ../commands/serve.ts, imported on run. */

import type { ServeFlags } from '../commands/serve.js';
import { descriptionOf, type RegisterCommand } from './index.js';
import { withServerLimitOptions } from './shared.js';

export const registerServe: RegisterCommand = (program, io, setExitCode) => {
  const command = program
    .command('serve')
    .description(descriptionOf('serve'))
    .argument('<dir>', 'the directory whose files are served')
    .option('--port <port>', 'port to listen on (0 = any)', '0')
    .option('--host <address>', 'address to listen on', '127.0.0.1')
    .option('--token <token>', 'answer only requests with Authorization: Bearer <token>')
    .option('--rate-mbps <mbit/s>', 'cap on what the server sends, all responses together')
    .option(
      '--tls-cert <file>',
      'serve HTTPS with this certificate (PEM); clients trust its CA with --tls-ca',
    )
    .option('--tls-key <file>', 'the private key (PEM) of --tls-cert');
  withServerLimitOptions(command, 30).action(async (dir: string, flags: ServeFlags) => {
    const { serveCommand } = await import('../commands/serve.js');
    setExitCode(await serveCommand(dir, flags, io));
  });
};
