"""Tests of NEON's building blocks: the weight-factorised dense layer, Fourier features,
the operator backbone with its split decoder, the EpiNet with its frozen prior, and the
paper's parameter counts."""

import dataclasses
import math

import pytest
import torch
from torch import nn

from botorch_nn_uq.models import NEON, NEONHyperparameters
from botorch_nn_uq.nn.neon import (
    EpiNet,
    EpistemicOperatorNetwork,
    FactorizedLinear,
    FourierFeatures,
    OperatorBackbone,
    count_parameters,
    tile,
)
from tests.testing import seeded_rand, seeded_randn, tolerances


def _inputs(*shape, tkwargs, seed=1):
    return seeded_rand(*shape, seed=seed, **tkwargs)


def _backbone(tkwargs, fourier_scale=None, decoder_depth=3, **kwargs):
    torch.manual_seed(0)
    settings = {
        "input_dim": 3,
        "output_dim": 2,
        "encoder_widths": (8, 7),
        "latent_dim": 12,
        "decoder_depth": decoder_depth,
        "decoder_width": 6,
        "query_dim": 2,
        "fourier_scale": fourier_scale,
        **kwargs,
    }
    return OperatorBackbone(**settings).to(**tkwargs)


def _epinet(
    tkwargs, feature_dim=5, output_dim=2, index_dim=4, prior_scale=0.7, hidden_widths=(6, 5)
):
    torch.manual_seed(1)
    return EpiNet(
        feature_dim,
        output_dim,
        index_dim=index_dim,
        hidden_widths=hidden_widths,
        prior_widths=(5, 5),
        prior_scale=prior_scale,
    ).to(**tkwargs)


def _network(tkwargs, fourier_scale=None, output_activation="identity"):
    backbone = _backbone(tkwargs, fourier_scale)
    epinet = _epinet(tkwargs, backbone.feature_dim, 2, index_dim=4)
    return EpistemicOperatorNetwork(backbone, epinet, output_activation)


def _gelu(X):
    return nn.functional.gelu(X)


@pytest.mark.parametrize("fourier_scale", [None, 2.0])
def test_a_generator_builds_the_network_that_the_seeded_global_rng_builds(fourier_scale):
    settings = {
        "input_dim": 3,
        "output_dim": 2,
        "encoder_widths": (8, 7),
        "latent_dim": 12,
        "decoder_depth": 3,
        "decoder_width": 6,
        "query_dim": 2,
        "fourier_scale": fourier_scale,
    }

    def build(generator):
        backbone = OperatorBackbone(**settings, generator=generator)
        epinet = EpiNet(backbone.feature_dim, 2, 4, (6, 5), (5, 5), 0.7, generator=generator)
        return EpistemicOperatorNetwork(backbone, epinet)

    torch.manual_seed(6)
    expected = build(None)
    state = torch.random.get_rng_state()
    network = build(torch.Generator().manual_seed(6))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert network.epinet.prior.member_seeds == expected.epinet.prior.member_seeds
    for actual, wanted in zip(network.parameters(), expected.parameters(), strict=True):
        assert torch.equal(actual, wanted)


# ---------------------------------------------------------------------------
# FactorizedLinear


def test_factorized_weight_is_direction_times_exp_scale_per_column(tkwargs):
    torch.manual_seed(0)
    layer = FactorizedLinear(5, 4).to(**tkwargs)
    assert layer.direction.shape == (5, 4)
    assert layer.log_scale.shape == layer.bias.shape == (4,)
    weight = layer.weight
    assert weight.shape == (5, 4)
    for column in range(4):
        expected = layer.direction[:, column] * math.exp(layer.log_scale[column].item())
        torch.testing.assert_close(weight[:, column], expected)


def test_factorized_forward_is_affine(tkwargs):
    torch.manual_seed(0)
    layer = FactorizedLinear(5, 4).to(**tkwargs)
    with torch.no_grad():
        layer.bias.copy_(torch.arange(4, **tkwargs))  # a non-zero bias
    X = _inputs(2, 3, 5, tkwargs=tkwargs)
    output = layer(X)
    assert output.shape == (2, 3, 4)
    torch.testing.assert_close(output, X @ layer.weight + layer.bias)


def test_factorized_parameter_count_and_gradients(tkwargs):
    layer = FactorizedLinear(7, 3).to(**tkwargs)
    assert count_parameters(layer) == 7 * 3 + 2 * 3
    layer(_inputs(4, 7, tkwargs=tkwargs)).pow(2).sum().backward()
    for parameter in (layer.direction, layer.log_scale, layer.bias):
        assert parameter.grad is not None
        assert parameter.grad.abs().sum() > 0


def test_factorized_initialisation(tkwargs):
    r"""``s ~ N(1, 0.1)`` and ``W = V exp(s)`` is Glorot-normal at initialisation."""
    torch.manual_seed(0)
    layer = FactorizedLinear(200, 300).to(**tkwargs)
    scale = layer.log_scale.detach()
    assert abs(scale.mean().item() - 1.0) < 5 * 0.1 / math.sqrt(300)
    assert abs(scale.std().item() - 0.1) < 0.02
    weight = layer.weight.detach()
    assert abs(weight.mean().item()) < 0.002
    assert weight.std().item() == pytest.approx(math.sqrt(2.0 / 500), rel=0.03)
    assert torch.equal(layer.bias, torch.zeros(300, **tkwargs))


# ---------------------------------------------------------------------------
# Fourier features and tiling


def test_fourier_features_are_cos_and_sin_of_the_projection(tkwargs):
    torch.manual_seed(0)
    features = FourierFeatures(2, 6, scale=5.0).to(**tkwargs)
    assert features.frequencies.shape == (2, 3)
    assert features.frequencies.requires_grad
    Y = _inputs(4, 5, 2, tkwargs=tkwargs)
    output = features(Y)
    projected = Y @ features.frequencies
    assert output.shape == (4, 5, 6)
    torch.testing.assert_close(output, torch.cat([projected.cos(), projected.sin()], dim=-1))


def test_fourier_features_scale():
    torch.manual_seed(0)
    frequencies = FourierFeatures(4, 4000, scale=5.0).frequencies.detach()
    assert frequencies.std().item() == pytest.approx(5.0, rel=0.05)


def test_fourier_features_must_be_even():
    with pytest.raises(ValueError, match="even"):
        FourierFeatures(2, 5, scale=1.0)


def test_tile_repeats_and_truncates(tkwargs):
    values = torch.tensor([1.0, 2.0, 3.0], **tkwargs)
    torch.testing.assert_close(tile(values, 7), torch.tensor([1.0, 2, 3, 1, 2, 3, 1], **tkwargs))
    torch.testing.assert_close(tile(values, 6), values.repeat(2))
    torch.testing.assert_close(tile(values, 3), values)
    torch.testing.assert_close(tile(values, 2), values[:2])
    batched = _inputs(4, 2, 3, tkwargs=tkwargs)
    tiled = tile(batched, 8)
    assert tiled.shape == (4, 2, 8)
    torch.testing.assert_close(tiled, torch.cat([batched, batched, batched[..., :2]], dim=-1))


# ---------------------------------------------------------------------------
# The operator backbone


def _manual_backbone(backbone, U, Y):
    r"""The split decoder written out with the module's layers; ``U`` and ``Y`` of the
    same leading shape."""
    beta = backbone.encoder(U)
    chunk = backbone.latent_dim // backbone.decoder_depth
    hidden = tile(Y, chunk) if backbone.encoding is None else backbone.encoding(Y)
    for index, layer in enumerate(backbone.decoder_layers):
        inputs = torch.cat([hidden, beta[..., index * chunk : (index + 1) * chunk]], dim=-1)
        hidden = _gelu(inputs @ layer.weight + layer.bias)
    mean = hidden @ backbone.head.weight + backbone.head.bias
    features = torch.cat([beta, hidden, tile(Y, backbone.latent_dim)], dim=-1)
    return mean, features


@pytest.mark.parametrize("fourier_scale", [None, 2.0])
def test_backbone_matches_a_manual_split_decoder(fourier_scale, tkwargs):
    backbone = _backbone(tkwargs, fourier_scale)
    assert backbone.chunk == 4
    assert [layer.direction.shape for layer in backbone.decoder_layers] == [
        (4 + 4, 6),
        (6 + 4, 6),
        (6 + 4, 6),
    ]
    assert backbone.feature_dim == 2 * 12 + 6
    U, Y = _inputs(5, 3, seed=2, tkwargs=tkwargs), _inputs(5, 2, seed=3, tkwargs=tkwargs)
    mean, features = backbone(U, Y)
    assert mean.shape == (5, 2)
    assert features.shape == (5, backbone.feature_dim)
    expected_mean, expected_features = _manual_backbone(backbone, U, Y)
    torch.testing.assert_close(mean, expected_mean)
    torch.testing.assert_close(features, expected_features)


def test_features_layout_is_beta_last_hidden_and_tiled_coordinates(tkwargs):
    backbone = _backbone(tkwargs)
    U, Y = _inputs(5, 3, seed=2, tkwargs=tkwargs), _inputs(5, 2, seed=3, tkwargs=tkwargs)
    _, features = backbone(U, Y)
    beta, hidden, coordinates = features.split([12, 6, 12], dim=-1)
    torch.testing.assert_close(beta, backbone.encoder(U))
    torch.testing.assert_close(coordinates, Y.repeat(1, 6))
    # h_N: the head applied to it gives the mean.
    head = backbone.head
    torch.testing.assert_close(hidden @ head.weight + head.bias, backbone(U, Y)[0])


def test_decoder_chunks_feed_the_layers_in_order(tkwargs):
    r"""With an identity encoder ``U`` is ``beta``: perturbing chunk ``i`` changes the
    hidden state from decoder layer ``i`` on and leaves earlier layers unchanged."""
    backbone = _backbone(tkwargs, input_dim=12)
    backbone.encoder = nn.Identity()
    hidden_states = []
    for layer in backbone.decoder_layers:
        layer.register_forward_hook(lambda module, inputs, output: hidden_states.append(output))
    beta, Y = _inputs(4, 12, seed=2, tkwargs=tkwargs), _inputs(4, 2, seed=3, tkwargs=tkwargs)
    backbone(beta, Y)
    reference = list(hidden_states)
    for chunk in range(3):
        hidden_states.clear()
        perturbed = beta.clone()
        perturbed[:, chunk * 4 : (chunk + 1) * 4] += 1.0
        backbone(perturbed, Y)
        for layer in range(3):
            unchanged = torch.equal(hidden_states[layer], reference[layer])
            assert unchanged == (layer < chunk), (chunk, layer)


def test_latent_dim_must_be_a_multiple_of_the_depth(tkwargs):
    with pytest.raises(ValueError, match="multiple of the decoder depth"):
        _backbone(tkwargs, latent_dim=10, decoder_depth=3)


@pytest.mark.parametrize("fourier_scale", [None, 2.0])
def test_inputs_broadcast_against_query_points(fourier_scale, tkwargs):
    backbone = _backbone(tkwargs, fourier_scale)
    U, Y = _inputs(4, 1, 3, seed=2, tkwargs=tkwargs), _inputs(7, 2, seed=3, tkwargs=tkwargs)
    mean, features = backbone(U, Y)
    assert mean.shape == (4, 7, 2)
    assert features.shape == (4, 7, backbone.feature_dim)
    for i in range(4):
        expected_mean, expected_features = backbone(U[i].expand(7, 3), Y)
        torch.testing.assert_close(mean[i], expected_mean)
        torch.testing.assert_close(features[i], expected_features)


def test_scalar_backbone_is_a_plain_mlp(tkwargs):
    backbone = _backbone(tkwargs, decoder_depth=0, latent_dim=10)
    assert not hasattr(backbone, "decoder_layers")
    assert backbone.feature_dim == 2 * 10 + 3
    U = _inputs(2, 5, 3, seed=2, tkwargs=tkwargs)
    mean, features = backbone(U)
    assert mean.shape == (2, 5, 2)
    assert features.shape == (2, 5, 23)
    beta = backbone.encoder(U)
    torch.testing.assert_close(features, torch.cat([beta, _gelu(beta), U], dim=-1))
    torch.testing.assert_close(mean, _gelu(beta) @ backbone.head.weight + backbone.head.bias)
    # The encoder: Dense-GELU-Dense-GELU-Dense (no activation on beta).
    assert [type(m).__name__ for m in backbone.encoder] == [
        "FactorizedLinear",
        "GELU",
        "FactorizedLinear",
        "GELU",
        "FactorizedLinear",
    ]


# ---------------------------------------------------------------------------
# The EpiNet


def _manual_learnable(epinet, features, Z):
    r"""``A(x~, z) z`` with the learnable MLP applied to the explicit ``concat(x~, z)``,
    one index at a time (``... x S x d_out``)."""
    outputs = []
    for z in Z:
        hidden = torch.cat([features, z.expand(*features.shape[:-1], -1)], dim=-1)
        for index, layer in enumerate(epinet.learnable):
            if index:
                hidden = _gelu(hidden)
            hidden = hidden @ layer.weight + layer.bias
        matrices = hidden.unflatten(-1, (epinet.output_dim, epinet.index_dim))
        outputs.append((matrices @ z).unsqueeze(-2))
    return torch.cat(outputs, dim=-2)


def _manual_prior(epinet, features, Z):
    r"""``sum_k z_k MLP_k(x~)`` from the members of the frozen ``BatchedMLP`` (ReLU)."""
    members = []
    for k in range(epinet.index_dim):
        hidden = features
        last = len(epinet.prior.weights) - 1
        for index, (weight, bias) in enumerate(
            zip(epinet.prior.weights, epinet.prior.biases, strict=True)
        ):
            hidden = hidden @ weight[k] + bias[k, 0]
            if index < last:
                hidden = torch.relu(hidden)
        members.append(hidden)
    prior = torch.stack(members, dim=-2)  # ... x d_z x d_out
    return torch.einsum("sk,...ko->...so", Z, prior)


@pytest.mark.parametrize("hidden_widths", [(6, 5), (6,), ()])
def test_epinet_equals_the_explicit_concatenation_and_prior_sum(hidden_widths, tkwargs):
    epinet = _epinet(tkwargs, prior_scale=0.7, hidden_widths=hidden_widths)
    features = _inputs(3, 2, 5, seed=2, tkwargs=tkwargs)
    Z = seeded_randn(6, 4, seed=3, **tkwargs)
    output = epinet(features, Z)
    assert output.shape == (3, 2, 6, 2)
    learnable = _manual_learnable(epinet, features, Z)
    prior = _manual_prior(epinet, features, Z)
    torch.testing.assert_close(output, learnable + 0.7 * prior, **tolerances(tkwargs["dtype"]))
    # Each part alone: the prior scale switches the prior off, the learnable part is
    # zero when its last layer is.
    epinet.prior_scale = 0.0
    torch.testing.assert_close(epinet(features, Z), learnable, **tolerances(tkwargs["dtype"]))
    epinet.prior_scale = 0.7
    with torch.no_grad():
        for parameter in epinet.learnable[-1].parameters():
            parameter.zero_()
    torch.testing.assert_close(epinet(features, Z), 0.7 * prior, **tolerances(tkwargs["dtype"]))


def test_prior_is_linear_in_z(tkwargs):
    epinet = _epinet(tkwargs)
    with torch.no_grad():
        for parameter in epinet.learnable[-1].parameters():
            parameter.zero_()
    features = _inputs(5, 5, seed=2, tkwargs=tkwargs)
    Z = seeded_randn(3, 4, seed=3, **tkwargs)
    torch.testing.assert_close(epinet(features, -2 * Z), -2 * epinet(features, Z))
    torch.testing.assert_close(
        epinet(features, Z[:1] + Z[1:2]), epinet(features, Z[:1]) + epinet(features, Z[1:2])
    )


def test_prior_members_are_independent_mlps(tkwargs):
    epinet = _epinet(tkwargs, index_dim=4)
    assert epinet.prior.num_members == 4
    assert epinet.prior.hidden_widths == [5, 5]
    assert len(set(epinet.prior.member_seeds)) == 4
    weights = epinet.prior.weights[0]
    for k in range(4):
        for j in range(k):
            assert not torch.allclose(weights[k], weights[j])


@pytest.mark.parametrize("fourier_scale", [None, 2.0])
def test_the_prior_network_receives_no_gradient(fourier_scale, tkwargs):
    network = _network(tkwargs, fourier_scale)
    prior = list(network.epinet.prior.parameters())
    assert prior and all(not p.requires_grad for p in prior)
    assert count_parameters(network.epinet.prior) == 0
    assert count_parameters(network.epinet.prior, trainable_only=False) == sum(
        p.numel() for p in prior
    )
    U, Y = _inputs(4, 1, 3, seed=2, tkwargs=tkwargs), _inputs(5, 2, seed=3, tkwargs=tkwargs)
    Z = seeded_randn(6, 4, seed=3, **tkwargs)
    network(U, Y, Z).pow(2).sum().backward()
    assert all(p.grad is None for p in prior)
    # Everything else is trained.
    for name, parameter in network.named_parameters():
        if parameter.requires_grad:
            assert parameter.grad is not None, name
            assert parameter.grad.abs().sum() > 0, name


def test_the_backbone_receives_no_gradient_from_the_epinet(tkwargs):
    network = _network(tkwargs, fourier_scale=2.0)
    U, Y = _inputs(4, 1, 3, seed=2, tkwargs=tkwargs), _inputs(5, 2, seed=3, tkwargs=tkwargs)
    Z = seeded_randn(6, 4, seed=3, **tkwargs)
    _, features = network.backbone(U, Y)
    assert features.requires_grad  # the backbone does not detach; the EpiNet does
    network.epinet(features, Z).pow(2).sum().backward()
    for name, parameter in network.backbone.named_parameters():
        assert parameter.grad is None, name
    assert all(p.grad is not None for p in network.epinet.learnable.parameters())
    # The whole network's backbone gradients are those of the mean alone.
    network.zero_grad(set_to_none=True)
    network(U, Y, Z).sum().backward()
    combined = [p.grad.clone() for p in network.backbone.parameters()]
    network.zero_grad(set_to_none=True)
    (Z.shape[0] * network.backbone(U, Y)[0].sum()).backward()
    for got, expected in zip(combined, network.backbone.parameters(), strict=True):
        torch.testing.assert_close(got, expected.grad)


@pytest.mark.parametrize("output_activation", ["identity", "softplus"])
def test_zero_index_gives_the_backbone_mean(output_activation, tkwargs):
    network = _network(tkwargs, fourier_scale=2.0, output_activation=output_activation)
    U, Y = _inputs(4, 1, 3, seed=2, tkwargs=tkwargs), _inputs(5, 2, seed=3, tkwargs=tkwargs)
    samples = network(U, Y, torch.zeros(1, 4, **tkwargs))
    assert samples.shape == (4, 5, 1, 2)
    mean = network.backbone(U, Y)[0]
    expected = mean if output_activation == "identity" else nn.functional.softplus(mean)
    assert torch.equal(samples.squeeze(-2), expected)
    # Other indices move away from it.
    other = network(U, Y, torch.ones(1, 4, **tkwargs))
    assert not torch.allclose(other, samples)


def test_network_rejects_mismatched_feature_dim(tkwargs):
    backbone = _backbone(tkwargs)
    with pytest.raises(ValueError, match="feature_dim"):
        EpistemicOperatorNetwork(backbone, _epinet(tkwargs, backbone.feature_dim + 1))


def test_network_shapes_and_samples_per_index(tkwargs):
    network = _network(tkwargs)
    U, Y = _inputs(4, 1, 3, seed=2, tkwargs=tkwargs), _inputs(5, 2, seed=3, tkwargs=tkwargs)
    Z = seeded_randn(6, 4, seed=3, **tkwargs)
    samples = network(U, Y, Z)
    assert samples.shape == (4, 5, 6, 2)
    for s in range(6):
        torch.testing.assert_close(samples[..., s, :], network(U, Y, Z[s : s + 1])[..., 0, :])


# ---------------------------------------------------------------------------
# The paper's parameter counts (Table 3)


@pytest.mark.parametrize(
    ("preset", "num_channels", "trainable", "prior"),
    [
        # Prior: 16 members of feature_dim x 5 x 5 x d_s (feature_dim 192 and 256).
        ("pollutants", 1, 27_746, 16 * (192 * 5 + 5 + 30 + 6)),
        ("brusselator", 2, 38_820, 16 * (256 * 5 + 5 + 30 + 12)),
    ],
)
def test_paper_parameter_counts(preset, num_channels, trainable, prior, tkwargs):
    hyperparameters = NEONHyperparameters.preset(preset)
    train_X = _inputs(6, 4, tkwargs=tkwargs)  # four inputs u in both problems
    grid = _inputs(
        12, 2, seed=2, tkwargs=tkwargs
    )  # 2-D coordinates (the count does not depend on m)
    train_Y = _inputs(6, 12 * num_channels, seed=3, tkwargs=tkwargs)
    model = NEON(
        train_X,
        train_Y,
        output_grid=grid,
        num_channels=num_channels,
        **dataclasses.asdict(hyperparameters),
    )
    network = model._build_network(4, 12 * num_channels, torch.Generator())
    assert count_parameters(network) == trainable
    assert count_parameters(network, trainable_only=False) == trainable + prior
    # The same from the nn classes with the table's values.
    torch.manual_seed(0)
    backbone = OperatorBackbone(
        4,
        num_channels,
        encoder_widths=(64, 64),
        latent_dim=64 if preset == "pollutants" else 96,
        decoder_depth=2 if preset == "pollutants" else 3,
        decoder_width=64,
        query_dim=2,
        fourier_scale=None if preset == "pollutants" else 5.0,
    )
    epinet = EpiNet(backbone.feature_dim, num_channels, 16, (32, 32), (5, 5), 1.0)
    assert count_parameters(EpistemicOperatorNetwork(backbone, epinet)) == trainable
