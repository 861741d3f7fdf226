"""The leak warning under a cell: "more after every run" only once the same holder grew over
runs of the same cell (or cells with the same code), with advice that fits the holder (a list
of losses: ``.item()``; a recurrent hidden state: ``.detach()`` between batches). Cell by cell,
in IPython's in-process shell with the extension loaded."""

from __future__ import annotations

import textwrap

import pytest
import torch
from IPython.utils.capture import capture_output


@pytest.fixture
def one_torch_thread():
    """The tutorial trains 600 tiny steps; torch's intra-op threads waiting on each other on a
    busy shared machine make each step ~7x slower. One thread changes no value."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run(shell, cell: str) -> str:
    """Run one cell; return what it printed (the warnings go to stderr)."""
    with capture_output() as captured:
        result = shell.run_cell(textwrap.dedent(cell).strip() + "\n", store_history=True)
    assert result.success, result.error_in_exec or result.error_before_exec
    return captured.stdout + captured.stderr


# pytorch/tutorials, beginner_source/nlp/sequence_models_tutorial.py (commit f77e1c2c11be), its
# cells as sphinx-gallery splits them at the "#####" lines, code as written there (the
# comments and the prose left out). The LSTM state ``hidden`` is made once, in the second cell,
# and its graph saved ``inputs``; the training cell rebinds ``inputs`` and mentions
# ``model.hidden``: neither makes ``hidden`` hold more.
TUTORIAL_CELLS = [
    """
    import torch
    import torch.autograd as autograd
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.optim as optim

    torch.manual_seed(1)
    """,
    """
    lstm = nn.LSTM(3, 3)  # Input dim is 3, output dim is 3
    inputs = [autograd.Variable(torch.randn((1, 3)))
              for _ in range(5)]  # make a sequence of length 5

    # initialize the hidden state.
    hidden = (autograd.Variable(torch.randn(1, 1, 3)),
              autograd.Variable(torch.randn((1, 1, 3))))
    for i in inputs:
        out, hidden = lstm(i.view(1, 1, -1), hidden)

    inputs = torch.cat(inputs).view(len(inputs), 1, -1)
    hidden = (autograd.Variable(torch.randn(1, 1, 3)), autograd.Variable(
        torch.randn((1, 1, 3))))  # clean out hidden state
    out, hidden = lstm(inputs, hidden)
    print(out)
    print(hidden)
    """,
    """
    def prepare_sequence(seq, to_ix):
        idxs = [to_ix[w] for w in seq]
        tensor = torch.LongTensor(idxs)
        return autograd.Variable(tensor)


    training_data = [
        ("The dog ate the apple".split(), ["DET", "NN", "V", "DET", "NN"]),
        ("Everybody read that book".split(), ["NN", "V", "DET", "NN"])
    ]
    word_to_ix = {}
    for sent, tags in training_data:
        for word in sent:
            if word not in word_to_ix:
                word_to_ix[word] = len(word_to_ix)
    print(word_to_ix)
    tag_to_ix = {"DET": 0, "NN": 1, "V": 2}

    EMBEDDING_DIM = 6
    HIDDEN_DIM = 6
    """,
    """
    class LSTMTagger(nn.Module):

        def __init__(self, embedding_dim, hidden_dim, vocab_size, tagset_size):
            super(LSTMTagger, self).__init__()
            self.hidden_dim = hidden_dim

            self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)

            self.lstm = nn.LSTM(embedding_dim, hidden_dim)

            self.hidden2tag = nn.Linear(hidden_dim, tagset_size)
            self.hidden = self.init_hidden()

        def init_hidden(self):
            return (autograd.Variable(torch.zeros(1, 1, self.hidden_dim)),
                    autograd.Variable(torch.zeros(1, 1, self.hidden_dim)))

        def forward(self, sentence):
            embeds = self.word_embeddings(sentence)
            lstm_out, self.hidden = self.lstm(
                embeds.view(len(sentence), 1, -1), self.hidden)
            tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
            tag_scores = F.log_softmax(tag_space, dim=1)
            return tag_scores
    """,
    """
    model = LSTMTagger(EMBEDDING_DIM, HIDDEN_DIM, len(word_to_ix), len(tag_to_ix))
    loss_function = nn.NLLLoss()
    optimizer = optim.SGD(model.parameters(), lr=0.1)

    inputs = prepare_sequence(training_data[0][0], word_to_ix)
    tag_scores = model(inputs)
    print(tag_scores)

    for epoch in range(300):  # again, normally you would NOT do 300 epochs, it is toy data
        for sentence, tags in training_data:
            model.zero_grad()

            model.hidden = model.init_hidden()

            sentence_in = prepare_sequence(sentence, word_to_ix)
            targets = prepare_sequence(tags, tag_to_ix)

            tag_scores = model(sentence_in)

            loss = loss_function(tag_scores, targets)
            loss.backward()
            optimizer.step()

    inputs = prepare_sequence(training_data[0][0], word_to_ix)
    tag_scores = model(inputs)
    print(tag_scores)
    """,
]


def test_the_lstm_tutorial_run_cell_by_cell_gives_no_leak_warning(ip, one_torch_thread) -> None:
    printed = [run(ip, cell) for cell in TUTORIAL_CELLS]
    assert all("torchdevice_magic" not in text for text in printed), printed
    # what the false alarm named is there, with its graph, all the same
    hidden = ip.user_ns["hidden"]
    assert isinstance(hidden, tuple) and all(h.grad_fn is not None for h in hidden)
    # and the training cell run again holds no more through it either
    assert "torchdevice_magic" not in run(ip, TUTORIAL_CELLS[-1])


def test_a_holder_made_by_one_cell_and_mentioned_by_another_is_not_growing(ip) -> None:
    # the tutorial's mechanism, small: the graph saved x; rebinding x hands its 60 bytes to the
    # graph alone, and the second cell mentions hidden, so it is measured again
    run(
        ip,
        """
        import torch
        lstm = torch.nn.LSTM(3, 3)
        x = torch.randn(5, 1, 3)
        out, hidden = lstm(x, (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3)))
        """,
    )
    again = "x = torch.zeros(2, dtype=torch.long)\nstate = hidden"
    assert "torchdevice_magic" not in run(ip, again)
    assert "torchdevice_magic" not in run(ip, again)


def test_a_list_of_losses_growing_over_runs_of_one_cell_warns_with_item(ip) -> None:
    run(ip, "import torch\nmodel = torch.nn.Linear(64, 64)\nlosses = []")
    # another cell adds to it once: growth, but not yet "after every run"
    once = "losses.append(model(torch.randn(32, 64)).pow(2).sum())\nlast = losses[-1]"
    train = "for _ in range(4):\n    losses.append(model(torch.randn(32, 64)).pow(2).sum())"
    assert "torchdevice_magic" not in run(ip, once)
    assert "torchdevice_magic" not in run(ip, train)
    warned = run(ip, train)
    assert "⚠ torchdevice_magic: losses keeps 9 autograd graphs alive" in warned
    assert "more after every run: append loss.item()" in warned
    assert warned.count("torchdevice_magic") == 1


def test_a_hidden_state_growing_its_graph_over_runs_warns_with_detach(ip) -> None:
    run(
        ip,
        """
        import torch
        torch.manual_seed(0)
        lstm = torch.nn.LSTM(3, 3)
        hidden = (torch.zeros(1, 1, 3), torch.zeros(1, 1, 3))
        """,
    )
    # the state carried from batch to batch, never detached: its graph reaches back further
    # after every run
    step = "for _ in range(5):\n    out, hidden = lstm(torch.randn(1, 1, 3), hidden)"
    assert "torchdevice_magic" not in run(ip, step)
    warned = run(ip, step)
    assert "⚠ torchdevice_magic: hidden keeps 2 autograd graphs alive" in warned
    assert (
        "more after every run: detach it between batches: "
        "hidden = tuple(h.detach() for h in hidden)"
    ) in warned
    assert ".item()" not in warned
    # detached as advised: the next runs no longer grow it, and say nothing
    run(ip, "hidden = tuple(h.detach() for h in hidden)")
    fixed = "for _ in range(5):\n    out, hidden = lstm(torch.randn(1, 1, 3), hidden)\n" + (
        "hidden = tuple(h.detach() for h in hidden)"
    )
    assert "torchdevice_magic" not in run(ip, fixed)
    assert "torchdevice_magic" not in run(ip, fixed)


def test_the_first_measurement_of_a_holder_its_cell_made_is_not_growth(ip) -> None:
    run(ip, "import torch\nmodel = torch.nn.Linear(64, 64)")
    # the first run makes the list and fills it; only the runs after it add to a list that was
    # already there: the warning needs two of those
    fill = (
        "if 'history' not in globals():\n    history = []\n"
        "history.append(model(torch.randn(8, 64)).sum())"
    )
    assert "torchdevice_magic" not in run(ip, fill)
    assert "torchdevice_magic" not in run(ip, fill)
    warned = run(ip, fill)
    assert "history keeps 3 autograd graphs alive" in warned
    assert "more after every run: append loss.item()" in warned
