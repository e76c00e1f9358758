import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { AgentKind, SurfaceMode, SurfaceSchema } from '@tether/contract';
import { maxTierOf, visible } from '../../../gateway/src/surfaces';

test('plan mode and read-only subagents are capped at the read tier', () => {
  assert.equal(maxTierOf(create(SurfaceSchema, { mode: SurfaceMode.PLAN, agent: AgentKind.MAIN })), 'read');
  assert.equal(
    maxTierOf(create(SurfaceSchema, { mode: SurfaceMode.DEFAULT, agent: AgentKind.READ_ONLY_SUBAGENT })),
    'read',
  );
  assert.equal(
    maxTierOf(create(SurfaceSchema, { mode: SurfaceMode.PLAN, agent: AgentKind.READ_ONLY_SUBAGENT })),
    'read',
  );
});

test('the default surface sees every tier, also when the surface is left out', () => {
  assert.equal(maxTierOf(create(SurfaceSchema, { mode: SurfaceMode.DEFAULT, agent: AgentKind.MAIN })), 'exec');
  assert.equal(maxTierOf(undefined), 'exec');
});

test('visibility follows the tier order read < write < exec', () => {
  assert.ok(visible('read', 'read'));
  assert.ok(!visible('write', 'read'));
  assert.ok(!visible('exec', 'read'));
  assert.ok(visible('write', 'exec'));
  assert.ok(visible('exec', 'exec'));
});
