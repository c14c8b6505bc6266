"""What comes in: hand-ins placed into a workspace (`collect`), brought back to the release's
structure (`repair`), read for what they did to earn points they should not have (`integrity`),
and the status each one ends with (`status`).

It may import `course` and `isolation`.
"""
