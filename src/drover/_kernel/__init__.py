"""drover's kernel: claim, dispatch, completion, lease renewal, rescue and hand-back.

Nothing here knows a feature (ADR 0045): features attach through the doors
the kernel offers. See docs/architecture.md, "Read the kernel".
"""
