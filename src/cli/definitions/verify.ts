/** `weightcast verify`: flags and help; the work is in ../commands/verify.ts, imported on run. */

import type { VerifyFlags } from '../commands/verify.js';
import { descriptionOf, type RegisterCommand } from './index.js';

export const registerVerify: RegisterCommand = (program, io, setExitCode) => {
  program
    .command('verify')
    .description(descriptionOf('verify'))
    .argument('<dir>', 'directory holding the model files')
    .requiredOption('--manifest <file>', 'manifest to check against')
    .option('--digest <sha256>', 'refuse the manifest unless its digest is this')
    .option('--json', 'print a JSON report')
    .action(async (dir: string, flags: VerifyFlags) => {
      const { verifyCommand } = await import('../commands/verify.js');
      setExitCode(await verifyCommand(dir, flags, io));
    });
};
