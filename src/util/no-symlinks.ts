/**
 * A destination directory may hold symbolic links someone else made (`DIR/sub -> /etc`). Writing a
 * model file `sub/x` there would follow the link out of DIR, so every path under a destination is
 * checked component by component (lstat, never following) before it is created, opened or renamed
 * onto: a link anywhere below DIR is refused with PULL_DESTINATION_SYMLINK. DIR itself may be a
 * link (the user named it). Components that do not exist yet are made by us as real directories.
 *
 * The check and the write are separate calls, so a process that can change DIR while the pull runs
 * can still race it; this closes the standing trap, not a concurrent attacker with write access.
 */

import { lstat } from 'node:fs/promises';
import { join } from 'node:path';
import { WeightcastError } from '../errors.js';

/** `root/relative`, after checking that no existing component below `root` is a symbolic link. */
export async function pathWithoutSymlinks(root: string, relative: string): Promise<string> {
  let path = root;
  for (const segment of relative.split('/')) {
    if (segment === '') continue;
    path = join(path, segment);
    const info = await lstat(path).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' || error.code === 'ENOTDIR') return undefined;
      throw error;
    });
    if (info === undefined) break;
    if (info.isSymbolicLink()) {
      throw new WeightcastError(
        'PULL_DESTINATION_SYMLINK',
        `${path} is a symbolic link inside the destination ${root}; weightcast does not write through links (remove it or pull elsewhere)`,
        { file: relative },
      );
    }
  }
  return join(root, relative);
}
