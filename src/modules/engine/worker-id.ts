import { randomBytes } from 'node:crypto';
import os from 'node:os';

/**
 * The id a process's dispatching part writes on the attempts and events it holds: host, pid and a
 * random tag (a restarted process with the same pid is another worker), with `role` appended when
 * one process holds attempts under more than one id.
 */
export function processWorkerId(role?: string): string {
  const id = `${os.hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  return role === undefined ? id : `${id}:${role}`;
}
