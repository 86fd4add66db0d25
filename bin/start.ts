// PLACEHOLDER: the platform assembly.
import type { Command } from './cli.js';
export const startCommand: Command = { summary: 'start', async run() { return 0; } };
