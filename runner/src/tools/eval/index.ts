import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { evalTool } from './evalTool';
import { KernelManager } from './kernelManager';
import { DEFAULT_SETTINGS, type EvalSettings } from './schemas';

/** Wires `eval` when the run has a kernel factory (features.eval); kernels start on first use. */
export function registerEval(registry: ToolRegistry, run: RunContext): void {
  if (!run.features.eval) return;
  const settings = run.settingsFor<EvalSettings>('eval', DEFAULT_SETTINGS);
  const kernels = new KernelManager(settings, run.workspace.root);
  kernels.lifecycle = run.resources.lifecycle('kernel');
  registry.register(evalTool(kernels, settings));
  run.onStop(() => kernels.stopAll());
  // Each kernel's variables outlive a pause, as far as they serialize.
  run.portable.keep('eval', {
    large: true,
    suspend: (dir, budget) => kernels.suspend(dir, budget),
    prepare: (saved) => kernels.prepare(saved.kernels ?? [], saved.ahead),
    restore: (dir) => kernels.restore(dir),
  });
}
