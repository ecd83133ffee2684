#!/usr/bin/env node
// `node bin/weightcast.js ...` runs the command as bin/weightcast (the launcher npm installs) does:
// the entry is bin/weightcast.cjs, a CommonJS script (why: its header).
import './weightcast.cjs';
