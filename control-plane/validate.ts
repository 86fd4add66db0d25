// Turning request bodies into typed input: zod issues become one clear 400 message that names
// the fields (unknown ones included).
import type { z } from 'zod';
import { API_ERRORS } from './errors.js';

function describeIssue(issue: z.core.$ZodIssue): string {
  const path = issue.path.map(String).join('.');
  if (issue.code === 'unrecognized_keys') {
    const keys = issue.keys.map((k) => (path ? `${path}.${k}` : k));
    return `Unknown field${keys.length > 1 ? 's' : ''}: ${keys.join(', ')}`;
  }
  if (issue.code === 'invalid_type' && /received undefined$/.test(issue.message)) return `${path || 'body'} is required`;
  return path ? `${path}: ${issue.message}` : issue.message;
}

/** A one-line description of every issue. */
export function describeZodError(error: z.ZodError): string {
  return error.issues.map(describeIssue).join('; ');
}

/** Parses `input` with `schema`; a 400 ApiError naming the fields otherwise. */
export function parseInput<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const r = schema.safeParse(input);
  if (!r.success) throw API_ERRORS.validation(describeZodError(r.error));
  return r.data;
}
