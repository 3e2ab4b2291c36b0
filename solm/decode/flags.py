"""Flags a runtime puts on a result when something cut decoding short or forced its hand."""

MAX_NEW_TOKENS = "max_new_tokens"  # every runtime: the token cap was reached

# PASTA
POOL_FULL = "pool_full"  # the shared KV pool had no room for the next step
FORK_CAPPED = "fork_capped"  # a block reached --max-fork-tokens; the runtime closed it
FORK_EOS = "eos_in_fork"  # a block sampled EOS; read as `</async>`
EOS_WITH_OPEN_FORKS = "eos_with_open_forks"  # main ended while blocks were still open
TOPIC_CAPPED = "topic_capped"  # a topic reached its length cap and was forced to close
BLOCK_CUT = "block_cut"  # a stop cut a block short; the runtime closed it
# the guards that keep promises (`solm.decode.pasta.guards`): the block was closed by the
# runtime, its `</async>` fed as the model's own; the text stays well-formed Pasta-Lang
PROMISE_OVERRUN = "promise_overrun"  # a block ran past its promise and its slack
BLOCK_REPEATING = "block_repeating"  # a block wrote the same run of tokens again and again

# PASTA flags that mean the model broke the language (a length cap alone does not)
PASTA_STRUCTURAL = (FORK_EOS, EOS_WITH_OPEN_FORKS, FORK_CAPPED, TOPIC_CAPPED, POOL_FULL,
                    BLOCK_CUT)
# PASTA flags of a block a guard closed (well-formed; counted as "blocks cut by the guard")
PASTA_GUARDS = (PROMISE_OVERRUN, BLOCK_REPEATING)
