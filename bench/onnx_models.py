"""Four ONNX models built with onnx.helper, shaped like what exporters emit: a
ResNet-style CNN, a MobileNet-style depthwise CNN, a BERT-style encoder and a GPT-style
causal decoder (random weights, fixed seed); and CNNs at real sizes, 224 x 224
(REAL_MODELS: ResNet-50-sized, MobileNetV2-sized, ConvNeXt-style, ResNeXt-50-sized, and a
wav2vec2-style audio encoder over 1 s of 16 kHz audio). Used by
tests/test_onnx_models.py and bench/onnx.py; each builder takes the batch size and
returns (ModelProto, feeds maker).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def weight(self, shape, scale=None, base="w"):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
        return self.const(self.rng.normal(0, scale, shape).astype(np.float32), base)

    def const(self, value, base="c"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def op(self, op_type, inputs, n_out=1, **attrs):
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name, inputs, outputs):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="graphc-bench")
        m.ir_version = 8
        return m

    # layers --------------------------------------------------------------------------------
    def conv_bn(self, x, cin, cout, k, stride=1, group=1, act="relu"):
        w = self.weight((cout, cin // group, k, k))
        y = self.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4, group=group)
        bn = [self.const(self.rng.uniform(0.5, 1.5, cout).astype(np.float32), "gamma"),
              self.const(self.rng.normal(0, 0.1, cout).astype(np.float32), "beta"),
              self.const(self.rng.normal(0, 0.1, cout).astype(np.float32), "mean"),
              self.const(self.rng.uniform(0.5, 1.5, cout).astype(np.float32), "var")]
        y = self.op("BatchNormalization", [y] + bn, epsilon=1e-5)
        if act == "relu":
            y = self.op("Relu", [y])
        elif act == "relu6":
            y = self.op("Clip", [y, self.const(np.float32(0)), self.const(np.float32(6))])
        elif act == "silu":                     # as torch exports nn.SiLU()
            y = self.silu(y)
        return y

    def silu(self, x):
        return self.op("Mul", [x, self.op("Sigmoid", [x])])

    def linear(self, x, din, dout):
        y = self.op("MatMul", [x, self.weight((din, dout))])
        return self.op("Add", [y, self.const(np.zeros(dout, np.float32) +
                                             self.rng.normal(0, 0.02, dout).astype(np.float32))])

    def layer_norm(self, x, d):
        return self.op("LayerNormalization", [x, self.const(np.ones(d, np.float32)),
                                              self.const(np.zeros(d, np.float32))],
                       axis=-1, epsilon=1e-5)

    def gelu_erf(self, x):                      # as torch exports nn.GELU()
        h = self.op("Div", [x, self.const(np.float32(np.sqrt(2.0)))])
        h = self.op("Add", [self.op("Erf", [h]), self.const(np.float32(1.0))])
        return self.op("Mul", [self.op("Mul", [x, h]), self.const(np.float32(0.5))])

    def gelu_tanh(self, x):                     # GPT-2's gelu_new
        cube = self.op("Pow", [x, self.const(np.float32(3.0))])
        inner = self.op("Add", [x, self.op("Mul", [cube, self.const(np.float32(0.044715))])])
        inner = self.op("Mul", [inner, self.const(np.float32(np.sqrt(2 / np.pi)))])
        t = self.op("Add", [self.op("Tanh", [inner]), self.const(np.float32(1.0))])
        return self.op("Mul", [self.op("Mul", [x, t]), self.const(np.float32(0.5))])

    def heads(self, x, batch_dims, seq, heads, dh):
        """[B,S,H*D] -> [B,H,S,D] through a Shape -> Gather -> Concat -> Reshape chain."""
        shape = self.op("Shape", [x])
        b = self.op("Gather", [shape, self.const(np.array([0], np.int64))], axis=0)
        s = self.op("Gather", [shape, self.const(np.array([1], np.int64))], axis=0)
        target = self.op("Concat", [b, s, self.const(np.array([heads, dh], np.int64))], axis=0)
        return self.op("Transpose", [self.op("Reshape", [x, target])], perm=[0, 2, 1, 3])

    def merge(self, x, hidden):
        x = self.op("Transpose", [x], perm=[0, 2, 1, 3])
        return self.op("Reshape", [x, self.const(np.array([0, 0, hidden], np.int64))])

    def attention(self, x, hidden, heads, seq, mask_add):
        dh = hidden // heads
        qkv = self.linear(x, hidden, 3 * hidden)
        q, k, v = self.op("Split", [qkv, self.const(np.array([hidden] * 3, np.int64))],
                          n_out=3, axis=-1)
        q, k, v = (self.heads(t, 2, seq, heads, dh) for t in (q, k, v))
        scores = self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])])
        scores = self.op("Div", [scores, self.const(np.float32(np.sqrt(dh)))])
        scores = self.op("Add", [scores, mask_add])
        probs = self.op("Softmax", [scores], axis=-1)
        ctx = self.merge(self.op("MatMul", [probs, v]), hidden)
        return self.linear(ctx, hidden, hidden)


def _classifier(b, name, x, h, channels, batch, size, classes):
    """Global average pool, flatten and a Gemm to the logits; the model and its feeds."""
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    b.op("Gemm", [h, b.weight((classes, channels)), b.const(np.zeros(classes, np.float32))],
         transB=1)
    b.nodes[-1].output[0] = "logits"
    m = b.model(name, [helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                                     [batch, 3, size, size])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])])
    return m, lambda rng: {x: rng.normal(size=(batch, 3, size, size)).astype(np.float32)}


def resnet(batch: int, width: int = 32, size: int = 32, classes: int = 10):
    b = _Builder(1)
    x = "image"
    h = b.conv_bn(x, 3, width, 3)
    cin = width
    for cout, stride in ((width, 1), (width, 1), (2 * width, 2), (2 * width, 1)):
        y = b.conv_bn(h, cin, cout, 3, stride)
        y = b.conv_bn(y, cout, cout, 3, 1, act=None)
        skip = h if (cin == cout and stride == 1) else b.conv_bn(h, cin, cout, 1, stride, act=None)
        h = b.op("Relu", [b.op("Add", [y, skip])])
        cin = cout
    return _classifier(b, "resnet", x, h, cin, batch, size, classes)


def mobilenet(batch: int, width: int = 32, size: int = 64, classes: int = 10):
    b = _Builder(2)
    x = "image"
    h = b.conv_bn(x, 3, width, 3, 2, act="relu6")
    c = width
    for cout, stride in ((2 * width, 1), (4 * width, 2), (4 * width, 1), (8 * width, 2)):
        h = b.conv_bn(h, c, c, 3, stride, group=c, act="relu6")        # depthwise
        h = b.conv_bn(h, c, cout, 1, act="relu6")                      # pointwise
        c = cout
    return _classifier(b, "mobilenet", x, h, c, batch, size, classes)


def convnext(batch: int, dims=(48, 96, 192, 384), depths=(2, 2, 6, 2), size: int = 224,
             classes: int = 1000):
    """ConvNeXt-style, as torch exports transformers' ConvNextModel: a 4 x 4 stride-4
    stem, blocks of depthwise 7 x 7 -> channels-last LayerNorm -> Linear(4C) -> GELU ->
    Linear(C) -> layer scale -> residual, LayerNorm + 2 x 2 stride-2 downsampling. For
    compile time (bench/compile_time.py); not among MODELS (the speed tables' four)."""
    b = _Builder(5)
    x = "image"

    def channels_first_norm(h, c):
        h = b.op("Transpose", [h], perm=[0, 2, 3, 1])
        return b.op("Transpose", [b.layer_norm(h, c)], perm=[0, 3, 1, 2])

    h = b.op("Conv", [x, b.weight((dims[0], 3, 4, 4)), b.const(np.zeros(dims[0], np.float32))],
             kernel_shape=[4, 4], strides=[4, 4])
    h = channels_first_norm(h, dims[0])
    for stage, (c, depth) in enumerate(zip(dims, depths)):
        if stage:
            h = channels_first_norm(h, dims[stage - 1])
            h = b.op("Conv", [h, b.weight((c, dims[stage - 1], 2, 2)),
                              b.const(np.zeros(c, np.float32))], kernel_shape=[2, 2],
                     strides=[2, 2])
        for _ in range(depth):
            y = b.op("Conv", [h, b.weight((c, 1, 7, 7)), b.const(np.zeros(c, np.float32))],
                     kernel_shape=[7, 7], pads=[3] * 4, group=c)
            y = b.layer_norm(b.op("Transpose", [y], perm=[0, 2, 3, 1]), c)
            y = b.linear(b.gelu_erf(b.linear(y, c, 4 * c)), 4 * c, c)
            y = b.op("Mul", [y, b.const(np.full(c, 0.1, np.float32), "layer_scale")])
            h = b.op("Add", [h, b.op("Transpose", [y], perm=[0, 3, 1, 2])])
    h = b.layer_norm(b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1), dims[-1])
    b.op("Gemm", [h, b.weight((classes, dims[-1])), b.const(np.zeros(classes, np.float32))],
         transB=1)
    b.nodes[-1].output[0] = "logits"
    m = b.model("convnext", [helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                                           [batch, 3, size, size])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])])
    return m, lambda rng: {x: rng.normal(size=(batch, 3, size, size)).astype(np.float32)}


def bert(batch: int, seq: int = 64, hidden: int = 128, heads: int = 4, layers: int = 2,
         vocab: int = 1000):
    b = _Builder(3)
    ids, mask = "input_ids", "attention_mask"
    emb = b.op("Gather", [b.weight((vocab, hidden), 0.02), ids], axis=0)
    pos = b.op("Gather", [b.weight((seq, hidden), 0.02), b.const(np.arange(seq, dtype=np.int64))],
               axis=0)
    h = b.layer_norm(b.op("Add", [emb, pos]), hidden)
    m = b.op("Cast", [b.op("Unsqueeze", [mask, b.const(np.array([1, 2], np.int64))])],
             to=TensorProto.FLOAT)
    mask_add = b.op("Mul", [b.op("Sub", [b.const(np.float32(1.0)), m]),
                            b.const(np.float32(-10000.0))])
    for _ in range(layers):
        h = b.layer_norm(b.op("Add", [h, b.attention(h, hidden, heads, seq, mask_add)]), hidden)
        f = b.linear(b.gelu_erf(b.linear(h, hidden, 4 * hidden)), 4 * hidden, hidden)
        h = b.layer_norm(b.op("Add", [h, f]), hidden)
    b.nodes[-1].output[0] = "last_hidden_state"
    m = b.model("bert", [helper.make_tensor_value_info(ids, TensorProto.INT64, [batch, seq]),
                         helper.make_tensor_value_info(mask, TensorProto.INT64, [batch, seq])],
                [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                               [batch, seq, hidden])])

    def feeds(rng):
        lengths = rng.integers(seq // 2, seq + 1, batch)
        return {ids: rng.integers(0, vocab, (batch, seq)).astype(np.int64),
                mask: (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)}
    return m, feeds


def gpt(batch: int, seq: int = 64, hidden: int = 128, heads: int = 4, layers: int = 2,
        vocab: int = 1000):
    b = _Builder(4)
    ids = "input_ids"
    emb = b.op("Gather", [b.weight((vocab, hidden), 0.02), ids], axis=0)
    pos = b.op("Gather", [b.weight((seq, hidden), 0.02), b.const(np.arange(seq, dtype=np.int64))],
               axis=0)
    h = b.op("Add", [emb, pos])
    causal = np.triu(np.full((seq, seq), -1e9, np.float32), 1)[None, None]
    mask_add = b.const(causal, "causal_mask")
    for _ in range(layers):
        h = b.op("Add", [h, b.attention(b.layer_norm(h, hidden), hidden, heads, seq, mask_add)])
        f = b.linear(b.gelu_tanh(b.linear(b.layer_norm(h, hidden), hidden, 4 * hidden)),
                     4 * hidden, hidden)
        h = b.op("Add", [h, f])
    b.op("MatMul", [b.layer_norm(h, hidden), b.weight((hidden, vocab))])
    b.nodes[-1].output[0] = "logits"
    m = b.model("gpt", [helper.make_tensor_value_info(ids, TensorProto.INT64, [batch, seq])],
                [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, seq, vocab])])
    return m, lambda rng: {ids: rng.integers(0, vocab, (batch, seq)).astype(np.int64)}


def resnet50(batch: int, size: int = 224, classes: int = 1000, depths=(3, 4, 6, 3)):
    """ResNet-50-sized: a 7 x 7 stride-2 stem and max pool, then bottleneck blocks
    (1 x 1, 3 x 3, 1 x 1 with 4x expansion) of 64..512 channels, depths 3-4-6-3."""
    return _bottleneck_net(_Builder(6), "resnet50", batch, size, classes, depths, 1, 1)


def _bottleneck_net(b, name, batch, size, classes, depths, groups, widen):
    """The stem, then bottlenecks of 64..512 planes: 1 x 1 to widen * planes channels,
    3 x 3 in `groups` groups (the stride), 1 x 1 to 4 * planes."""
    x = "image"
    h = b.conv_bn(x, 3, 64, 7, 2)
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (planes, depth) in enumerate(zip((64, 128, 256, 512), depths)):
        width, cout = widen * planes, 4 * planes
        for k in range(depth):
            stride = 2 if stage and not k else 1
            y = b.conv_bn(h, cin, width, 1)
            y = b.conv_bn(y, width, width, 3, stride, group=groups)
            y = b.conv_bn(y, width, cout, 1, act=None)
            skip = h if cin == cout and stride == 1 else \
                b.conv_bn(h, cin, cout, 1, stride, act=None)
            h = b.op("Relu", [b.op("Add", [y, skip])])
            cin = cout
    return _classifier(b, name, x, h, cin, batch, size, classes)


def mobilenet_v2(batch: int, size: int = 224, classes: int = 1000):
    """MobileNetV2-sized: inverted residual blocks (1 x 1 expansion by 6, depthwise
    3 x 3, 1 x 1 projection), 16..320 channels, ReLU6, a 1280-channel head."""
    b = _Builder(7)
    x = "image"
    h = b.conv_bn(x, 3, 32, 3, 2, act="relu6")
    c = 32
    for t, cout, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for k in range(n):
            stride, hidden = (s if k == 0 else 1), c * t
            y = h if t == 1 else b.conv_bn(h, c, hidden, 1, act="relu6")
            y = b.conv_bn(y, hidden, hidden, 3, stride, group=hidden, act="relu6")
            y = b.conv_bn(y, hidden, cout, 1, act=None)
            h = b.op("Add", [h, y]) if stride == 1 and c == cout else y
            c = cout
    h = b.conv_bn(h, c, 1280, 1, act="relu6")
    return _classifier(b, "mobilenet_v2", x, h, 1280, batch, size, classes)


def resnext50(batch: int, size: int = 224, classes: int = 1000, depths=(3, 4, 6, 3),
              groups: int = 32):
    """ResNeXt-50 (32 x 4d)-sized: ResNet-50's stem and bottlenecks whose 3 x 3
    convolution has 32 groups (128..1024 channels, 4..32 a group), outputs 256..2048."""
    return _bottleneck_net(_Builder(8), "resnext50", batch, size, classes, depths, groups, 2)


def wav2vec2(batch: int, seconds: float = 1.0, hidden: int = 768, heads: int = 12,
             layers: int = 2):
    """wav2vec2-base-style audio encoder over raw 16 kHz audio: seven 1-D convolutions of
    512 channels (kernels 10, 3, 3, 3, 3, 2, 2; strides 5, 2, ...; the first with
    per-channel normalization), GELU after each; LayerNorm and a projection to 768; the
    positional convolution (kernel 128, 16 groups, its last frame dropped) + GELU added
    back; LayerNorm and post-norm transformer layers (12 heads, FFN 3072)."""
    b = _Builder(9)
    x = "audio"
    samples = int(16000 * seconds)
    h = b.op("Unsqueeze", [x, b.const(np.array([1], np.int64))])
    cin, frames = 1, samples
    for i, (k, s) in enumerate([(10, 5)] + [(3, 2)] * 4 + [(2, 2)] * 2):
        h = b.op("Conv", [h, b.weight((512, cin, k))], kernel_shape=[k], strides=[s])
        if i == 0:
            h = b.op("InstanceNormalization", [h, b.const(np.ones(512, np.float32)),
                                               b.const(np.zeros(512, np.float32))])
        h = b.gelu_erf(h)
        cin, frames = 512, (frames - k) // s + 1
    h = b.linear(b.layer_norm(b.op("Transpose", [h], perm=[0, 2, 1]), 512), 512, hidden)
    p = b.op("Conv", [b.op("Transpose", [h], perm=[0, 2, 1]),
                      b.weight((hidden, hidden // 16, 128)),
                      b.const(np.zeros(hidden, np.float32))],
             kernel_shape=[128], pads=[64, 64], group=16)
    p = b.op("Slice", [p, b.const(np.array([0], np.int64)),
                       b.const(np.array([frames], np.int64)), b.const(np.array([2], np.int64))])
    h = b.op("Add", [h, b.op("Transpose", [b.gelu_erf(p)], perm=[0, 2, 1])])
    h = b.layer_norm(h, hidden)
    mask_add = b.const(np.zeros((1, 1, 1, frames), np.float32), "mask")
    for _ in range(layers):
        h = b.layer_norm(b.op("Add", [h, b.attention(h, hidden, heads, frames, mask_add)]),
                         hidden)
        f = b.linear(b.gelu_erf(b.linear(h, hidden, 4 * hidden)), 4 * hidden, hidden)
        h = b.layer_norm(b.op("Add", [h, f]), hidden)
    b.nodes[-1].output[0] = "last_hidden_state"
    m = b.model("wav2vec2", [helper.make_tensor_value_info(x, TensorProto.FLOAT,
                                                           [batch, samples])],
                [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                               [batch, frames, hidden])])
    return m, lambda rng: {x: rng.normal(0, 0.1, (batch, samples)).astype(np.float32)}


def efficientnet(batch: int, size: int = 224, classes: int = 1000):
    """EfficientNet-B0-style: MBConv blocks (1 x 1 expansion by 6, depthwise 3 x 3 or
    5 x 5, squeeze-and-excitation to a quarter of the block's input channels, 1 x 1
    projection), 16..320 channels, SiLU, a 1280-channel head."""
    b = _Builder(10)
    x = "image"
    h = b.conv_bn(x, 3, 32, 3, 2, act="silu")
    c = 32
    for t, cout, n, s, k in ((1, 16, 1, 1, 3), (6, 24, 2, 2, 3), (6, 40, 2, 2, 5),
                             (6, 80, 3, 2, 3), (6, 112, 3, 1, 5), (6, 192, 4, 2, 5),
                             (6, 320, 1, 1, 3)):
        for i in range(n):
            stride, hidden = (s if i == 0 else 1), c * t
            y = h if t == 1 else b.conv_bn(h, c, hidden, 1, act="silu")
            y = b.conv_bn(y, hidden, hidden, k, stride, group=hidden, act="silu")
            squeeze = max(1, c // 4)
            e = b.op("GlobalAveragePool", [y])
            e = b.silu(b.op("Conv", [e, b.weight((squeeze, hidden, 1, 1)),
                                     b.const(np.zeros(squeeze, np.float32))]))
            e = b.op("Sigmoid", [b.op("Conv", [e, b.weight((hidden, squeeze, 1, 1)),
                                               b.const(np.zeros(hidden, np.float32))])])
            y = b.conv_bn(b.op("Mul", [y, e]), hidden, cout, 1, act=None)
            h = b.op("Add", [h, y]) if stride == 1 and c == cout else y
            c = cout
    h = b.conv_bn(h, c, 1280, 1, act="silu")
    return _classifier(b, "efficientnet", x, h, 1280, batch, size, classes)


MODELS = {"resnet": resnet, "mobilenet": mobilenet, "bert": bert, "gpt": gpt}
REAL_MODELS = {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2,
               "efficientnet": efficientnet, "convnext": convnext, "resnext50": resnext50,
               "wav2vec2": wav2vec2}
